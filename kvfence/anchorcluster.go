package kvfence

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/clusterid"
)

// ClusterAnchor is an anchor store kept on a cluster that can say which
// cluster it is (etcdanchor.Store): every answer of an etcd cluster names
// its cluster ID. Init records the anchor's cluster ID in the receiver,
// and Open refuses an anchor on any other cluster (ErrAnchorClusterChanged)
// and an anchor on the receiver's own store's cluster (ErrAnchorNotApart).
type ClusterAnchor interface {
	audit.AnchorStore
	// ClusterID returns the ID of the cluster that answers for the
	// anchor now. An error is never an ID.
	ClusterID(ctx context.Context) (uint64, error)
	// ExpectCluster makes every later answer from another cluster an
	// error.
	ExpectCluster(id uint64)
}

// clusterEngine is an engine on a cluster that can say which one
// (etcdengine.Engine).
type clusterEngine interface {
	ClusterID(ctx context.Context) (uint64, error)
}

// clusterTimeout bounds asking a cluster for its ID at Init and Open.
const clusterTimeout = 10 * time.Second

// metaAnchorCluster records, from Init on, the cluster ID of the anchor
// given to Init (clusterid.Format), or noAnchorCluster for an anchor that
// is not on a cluster (a file). A receiver that has no such record at all
// was initialised before it existed; see checkAnchorCluster.
var metaAnchorCluster = []byte("anchor_cluster")

// noAnchorCluster is metaAnchorCluster's value for an anchor that names no
// cluster.
var noAnchorCluster = []byte("none")

// anchorClusterRecord returns what metaAnchorCluster records for anchor:
// its cluster's ID, asked now, or noAnchorCluster. An anchor on a cluster
// that does not answer is an error: nothing is recorded on a guess. The
// anchor is then held to that cluster (ExpectCluster).
func anchorClusterRecord(anchor audit.AnchorStore) ([]byte, error) {
	ca, ok := anchor.(ClusterAnchor)
	if !ok {
		return noAnchorCluster, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	id, err := ca.ClusterID(ctx)
	if err != nil {
		return nil, fmt.Errorf("kvfence: the anchor's cluster: %w", err)
	}
	ca.ExpectCluster(id)
	return []byte(clusterid.Format(id)), nil
}

// CheckApart refuses an anchor on the cluster that holds the store e itself
// (ErrAnchorNotApart): a snapshot restore of that one cluster would roll
// back the store and its anchor together, and the anchor would vouch for
// the restored state. It compares what the clusters say they are, so no
// spelling of an address (another host name, another member, a proxy)
// gets past it. An engine or anchor that is not on a cluster is apart by
// construction; one that does not answer is an error, never "apart".
// InitEngine, OpenEngine, VerifyChainEngine and RecoverEngine call it
// before they write anything; a store that keeps another chain under the
// same anchor rules (the ledger) calls it itself.
func CheckApart(e engine.Engine, anchor audit.AnchorStore) error {
	ce, ok1 := e.(clusterEngine)
	ca, ok2 := anchor.(ClusterAnchor)
	if !ok1 || !ok2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	store, err := ce.ClusterID(ctx)
	if err != nil {
		return fmt.Errorf("kvfence: the store's cluster: %w", err)
	}
	a, err := ca.ClusterID(ctx)
	if err != nil {
		return fmt.Errorf("kvfence: the anchor's cluster: %w", err)
	}
	if a == store {
		return fmt.Errorf("%w: the anchor and the store both answer as etcd cluster %s", ErrAnchorNotApart, clusterid.Format(a))
	}
	return nil
}

// recordedAnchorCluster returns the anchor cluster recorded at Init (meta
// anchor_cluster): its raw record, nil where there is none, and its ID, 0
// where it names no cluster (none recorded, or an anchor file at Init).
func (r *Receiver) recordedAnchorCluster() ([]byte, uint64, error) {
	var rec []byte
	err := r.view(func(tx engine.Tx) error {
		v, err := tx.Get(bucketMeta, metaAnchorCluster)
		rec = bytes.Clone(v)
		return err
	})
	if err != nil || len(rec) == 0 || bytes.Equal(rec, noAnchorCluster) {
		return rec, 0, err
	}
	id, err := clusterid.Parse(string(rec))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: the recorded anchor cluster: %v", ErrBadFormat, err)
	}
	return rec, id, nil
}

// liveAnchorCluster asks the cluster answering for the anchor its ID,
// within clusterTimeout. A cluster that does not say is an error, never a
// pass.
func liveAnchorCluster(ca ClusterAnchor) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	live, err := ca.ClusterID(ctx)
	if err != nil {
		return 0, fmt.Errorf("kvfence: the anchor's cluster: %w", err)
	}
	return live, nil
}

// checkAnchorCluster checks anchor against the receiver's own store
// (CheckApart) and holds an anchor on a cluster to the cluster recorded at
// Init, before the anchor is read. want is the operator's own statement of
// the anchor's cluster (Options.AnchorClusterID), 0 for none.
//
//   - A receiver that records a cluster accepts only that one: another
//     cluster answering at the anchor's address is ErrAnchorClusterChanged
//     (a Recover moves the record, on the recovery key's authority and
//     only to a cluster the operator states), and so is a want that
//     differs.
//   - A receiver that records none (initialised before the record
//     existed, or with an anchor file and now given an anchor on a
//     cluster) accepts the anchor's cluster only if want names it, and is
//     otherwise ErrAnchorClusterUnrecorded: a missing record is never
//     taken as "any cluster will do".
//   - An anchor that is not on a cluster (a file) is refused
//     (ErrAnchorClusterChanged) where the receiver records a cluster: a
//     copy of the anchor put in a file is not the anchor on that cluster,
//     and only a recovery moves the anchor off it.
//
// Once checked, the anchor is held to the cluster for the receiver's life
// (ExpectCluster).
func (r *Receiver) checkAnchorCluster(anchor audit.AnchorStore, want uint64) error {
	rec, recorded, err := r.recordedAnchorCluster()
	if err != nil {
		return err
	}
	ca, ok := anchor.(ClusterAnchor)
	if !ok {
		if recorded != 0 {
			return fmt.Errorf("%w: this receiver's anchor is on etcd cluster %q, recorded at init, and the anchor given is not on a cluster",
				ErrAnchorClusterChanged, string(rec))
		}
		return nil
	}
	if err := CheckApart(r.eng, anchor); err != nil {
		return err
	}
	live, err := liveAnchorCluster(ca)
	if err != nil {
		return err
	}
	switch {
	case recorded != 0 && live != recorded:
		return fmt.Errorf("%w: etcd cluster %s answers at the anchor's address; this receiver's anchor is on cluster %s, recorded at init",
			ErrAnchorClusterChanged, clusterid.Format(live), clusterid.Format(recorded))
	case want != 0 && live != want:
		return fmt.Errorf("%w: etcd cluster %s answers at the anchor's address, not cluster %s as given",
			ErrAnchorClusterChanged, clusterid.Format(live), clusterid.Format(want))
	case recorded == 0 && want == 0:
		return fmt.Errorf("%w: etcd cluster %s answers at the anchor's address, and this receiver recorded no anchor cluster at init",
			ErrAnchorClusterUnrecorded, clusterid.Format(live))
	}
	ca.ExpectCluster(live)
	return nil
}

// checkRecoveryCluster holds the anchor of a recovery to a cluster before
// the anchor is read. An admission names the anchor's checkpoint, not its
// cluster, so the recovery key's authority does not say which cluster may
// keep the anchor from now on: another cluster than the one recorded,
// answering at the anchor's address with a copy of the anchor, is refused
// (ErrAnchorClusterChanged) unless want, the operator's statement, names
// it, and a want that is not the cluster answering is refused as well. A
// receiver that records no cluster (an anchor file at init, or a record
// deleted) takes one only if want names it (ErrAnchorClusterUnrecorded).
// The cluster then recorded (anchorClusterRecord) is the one checked here.
func (r *Receiver) checkRecoveryCluster(anchor audit.AnchorStore, want uint64) error {
	ca, ok := anchor.(ClusterAnchor)
	if !ok {
		return nil
	}
	_, recorded, err := r.recordedAnchorCluster()
	if err != nil {
		return err
	}
	live, err := liveAnchorCluster(ca)
	if err != nil {
		return err
	}
	switch {
	case want != 0 && live != want:
		return fmt.Errorf("%w: etcd cluster %s answers at the anchor's address, not cluster %s as given",
			ErrAnchorClusterChanged, clusterid.Format(live), clusterid.Format(want))
	case want == 0 && recorded != 0 && live != recorded:
		return fmt.Errorf("%w: etcd cluster %s answers at the anchor's address; this receiver's anchor is on cluster %s, "+
			"and a recovery moves it to another cluster only if that cluster is stated",
			ErrAnchorClusterChanged, clusterid.Format(live), clusterid.Format(recorded))
	case want == 0 && recorded == 0:
		return fmt.Errorf("%w: etcd cluster %s answers at the anchor's address, and this receiver records no anchor cluster; "+
			"a recovery puts the anchor on a cluster only if that cluster is stated",
			ErrAnchorClusterUnrecorded, clusterid.Format(live))
	}
	ca.ExpectCluster(live)
	return nil
}
