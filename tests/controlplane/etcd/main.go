// Command etcd is the upstream etcd server, built from the go.etcd.io/etcd/server/v3
// module pinned by ETCD_VERSION in tests/k8s-version.env. It lives in its own Go module
// so that etcd's dependency versions do not fight those of Kubernetes.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
