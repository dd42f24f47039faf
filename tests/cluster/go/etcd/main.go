// Command etcd is etcd built from its etcdmain package, because Debian's etcd
// (3.4) is older than current Kubernetes supports. It lives in its own module
// so Kubernetes' dependency versions are not forced onto it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
