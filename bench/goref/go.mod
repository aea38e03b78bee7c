module statusvault.dev/bench/goref

go 1.26
