// The etcd 3.6 server, as the etcd release's own binary (its main package calls etcdmain.Main).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
