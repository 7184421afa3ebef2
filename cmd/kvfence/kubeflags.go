package main

import (
	"flag"

	"github.com/kvfence/kvfence/kubetarget"
	"github.com/kvfence/kvfence/kvfence"
)

// envKubeconfig names the kubeconfig file of the receiver's identity when
// --kubeconfig is not given.
const envKubeconfig = "KVFENCE_KUBECONFIG"

// kubeFlags say how the receiver reaches the Kubernetes API server of its
// targets of kind kubernetes (docs/design.md §4.2): a kubeconfig file, or
// the pod's own service account. Neither given means no dispatcher: such
// targets are then denied, never applied, and a receiver with a dispatch
// still in flight refuses to open (kvfence.ErrNoDispatcher).
type kubeFlags struct {
	kubeconfig string
	context    string
	inCluster  bool
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&k.context, "kube-context", "", "")
	fs.BoolVar(&k.inCluster, "kube-in-cluster", false, "")
}

func (k *kubeFlags) resolve(fs *flag.FlagSet, getenv func(string) string) {
	if fs.Lookup("kubeconfig") != nil && !isSet(fs, "kubeconfig") {
		k.kubeconfig = getenv(envKubeconfig)
	}
}

// on reports whether a way to the API server was given.
func (k *kubeFlags) on() bool { return k.kubeconfig != "" || k.inCluster }

// dispatchers returns the receiver's dispatchers: none without a way to
// the API server.
func (k *kubeFlags) dispatchers(cmd string) (map[kvfence.TargetKind]kvfence.Dispatcher, error) {
	var (
		d   *kubetarget.Dispatcher
		err error
	)
	switch {
	case k.kubeconfig != "" && k.inCluster:
		return nil, &usageError{msg: "kvfence " + cmd + ": --kubeconfig and --kube-in-cluster are mutually exclusive", hint: "kvfence " + cmd + " -h"}
	case k.context != "" && k.kubeconfig == "":
		return nil, &usageError{msg: "kvfence " + cmd + ": --kube-context names a context of --kubeconfig, which is not given", hint: "kvfence " + cmd + " -h"}
	case k.kubeconfig != "":
		d, err = kubetarget.FromKubeconfig(k.kubeconfig, k.context)
	case k.inCluster:
		d, err = kubetarget.InCluster()
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return map[kvfence.TargetKind]kvfence.Dispatcher{kvfence.TargetKubernetes: d}, nil
}

// usageKube documents the flags of kubeFlags.
const usageKube = `	--kubeconfig FILE
	    The kubeconfig of the receiver's own Kubernetes identity, through
	    which it reads and writes the objects of its targets of kind
	    kubernetes (defaults to $KVFENCE_KUBECONFIG; never ~/.kube/config).
	    Without it (or --kube-in-cluster) such targets are denied, and a
	    receiver with a write to one still in flight refuses to open.
	--kube-context NAME
	    The context of --kubeconfig to use (default: its current one).
	--kube-in-cluster
	    Use the pod's service account instead of --kubeconfig.
`
