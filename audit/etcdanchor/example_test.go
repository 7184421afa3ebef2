package etcdanchor_test

import (
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/audit/etcdanchor"
)

func ExampleParseAddress() {
	a, err := etcdanchor.ParseAddress("etcd://10.0.0.1:2379,10.0.0.2:2379/kvfence/anchor")
	fmt.Println(a.Endpoints, a.Key, err)

	// A key is spelled one way only.
	_, err = etcdanchor.ParseAddress("etcd://10.0.0.1:2379/kvfence//anchor")
	fmt.Println(errors.Is(err, etcdanchor.ErrBadAddress))
	// Output:
	// [10.0.0.1:2379 10.0.0.2:2379] /kvfence/anchor <nil>
	// true
}
