from statusvault.cli.main import entry

entry()
