"""A real local kube-apiserver + etcd for tests and demos (not used by the CLI at run time)."""
