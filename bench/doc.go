// Package bench measures what a durable fenced write costs, next to the
// physical limit of the disk and to the stores a receiver could be built on
// (docs/design.md §10). The same code drives the go test benchmarks of this package
// and the "kvfence bench" command, so the two report the same workloads.
// Under go test, -roundcpuprofile FILE and -roundmemprofile FILE profile
// a benchmark's timed round alone (the allocation profile with FILE.before
// as its base, for pprof -base), without the setup and the grants
// prepared for it, which go test's own -cpuprofile also covers:
//
//	go test ./bench -run X -bench 'Rows/^kvfence_submit_https$/^writers=64$' \
//		-benchtime 10000x -roundcpuprofile cpu.out
//
// # Rows
//
// Every row is measured in one run, in one directory, so on one disk; the
// numbers are meant to be read as ratios between rows of the same run:
//
//	fdatasync                       a 256-byte append to one shared file, then fdatasync: the physical limit
//	bbolt_update                    one 256-byte put per bbolt Update
//	bbolt_batch                     the same put through bbolt's DB.Batch with its defaults
//	bbolt_nosync_not_durable        the same put per Update with NoSync: a CPU-only reference, not durable
//	kvfence_submit                  Receiver.Submit of a distinct, applied, fenced write, file anchor included
//	kvfence_submit_https            the same write through client.Submit over loopback mTLS to server/, connections reused
//	kvfence_submit_witnessed        kvfence_submit acknowledged only once 2 of 3 witnesses cosigned its checkpoint, one round per group commit
//	kvfence_denied                  Receiver.Submit of a stale envelope: denied, and still recorded in the audit chain
//	kvfence_lifecycle               Activate, Submit and Hold of one action: three commits per op
//	kvfence_hold                    Admin.Hold of one scope on an idle receiver, one at a time (one writer only)
//	kvfence_hold_under_flood        the same while 64 workers submit (half stale, half current with a precondition
//	                                that never holds), each decided and recorded; fsyncs_per_op counts their commits too
//	sqlite_fenced                   the same fenced transaction on SQLite, WAL mode, synchronous=FULL
//	sqlite_fenced_rollback_journal  the same on SQLite with journal_mode=DELETE, synchronous=FULL
//
// Each row runs at each writer count: that many goroutines issue operations
// concurrently, with no lock of the harness between them. Work that is not
// the operation itself (creating scopes, activating the grants an applied
// write needs, encoding envelopes) is done before the timed region, in
// rounds sized from the measured rate, with the receiver reopened without
// fsync for that setup only; the timed region always runs on a durable
// receiver (except the row named not durable). A short warm-up round
// precedes each measurement and is not counted.
//
// # Reported values
//
// ops_per_s is operations completed divided by the wall time of the timed
// rounds. p50_us and p99_us are percentiles of the per-operation latencies,
// each timed on its own goroutine. allocs_per_op is the process's heap
// allocations during the timed rounds divided by the operations. With
// Options.Repeat the whole table is measured that many times over, pass
// after pass, and each row and writer count reports its pass with the
// median rate, so that a stall of a shared disk does not decide a ratio.
//
// fsyncs_per_op counts the fsync-like system calls (fsync, fdatasync) per
// operation. Go offers no per-process count of system calls, so the value
// is computed from commits the harness counts, multiplied by the calls each
// commit makes in the code paths involved; the per-commit numbers below
// were checked against strace -c -f on Linux:
//
//   - fdatasync: one call per operation, by construction.
//   - bbolt: two fdatasync calls per commit (the data pages, then the meta
//     page); commits are counted by the change of the transaction id. A
//     commit that grows the file adds one fsync, which is counted from the
//     file's sizes before and after and bbolt's growth rule (the size
//     doubles from 32 KiB to 16 MiB, then grows by 16 MiB).
//   - kvfence: the bbolt commit's two calls and its growth, plus one
//     fdatasync for the anchor (its slot is written in place); commits are
//     counted by the anchor writes, one per commit, through a counting
//     wrapper around audit.FileAnchor. Under group commit one commit serves many Submits,
//     which is what the per-op figure then shows.
//   - kvfence with witnesses: the receiver's calls, plus each witness's
//     bbolt commits (two fdatasyncs each, one commit per checkpoint it
//     cosigns) and growths. A witness holds its database's lock, so its
//     commits are counted from the transaction id in the file's meta
//     pages, read beside it; a witness that cosigned after its round had
//     the quorum (its answer no longer awaited) is counted too.
//   - SQLite in WAL mode with synchronous=FULL: one call per commit (the
//     WAL), and three per checkpoint cycle (the WAL before the checkpoint,
//     the database after it, the WAL header when the log restarts);
//     checkpoint cycles are counted from the checkpoint sequence number in
//     the WAL header.
//   - SQLite with a rollback journal and synchronous=FULL: four calls per
//     commit (the journal twice, its directory once since each transaction
//     creates a new journal, the database once).
//
// # Scaling
//
// Scale grows one receiver, without fsync, through sizes up to 1,000,000
// scopes, each with a target, a grant and a receipt, and at each size times
// durable applied Submits one at a time, the same Submits without the disk,
// the bytes bbolt uses per Submit and per action, and the process's peak
// memory. BenchmarkSubmitScale and TestScaleLarge run it under go test; the
// largest size only with KVFENCE_BENCH_LARGE=1, as it takes minutes.
//
// With ScaleOptions.NewEtcdClient it grows the receiver on etcd instead,
// durably, since a member always syncs, with concurrent callers whose calls
// group commit batches; the bytes columns are then the member's backend
// database, every revision included. TestScaleEtcdLarge runs it to 100,000
// scopes on one member that syncs, with KVFENCE_BENCH_LARGE=1.
//
// # Caveats
//
// The disk decides most of the durable rows: run on the disk a receiver
// will use, not on tmpfs, where fsync does nothing. Other processes writing
// to the same disk change the results. The SQLite rows do less than
// kvfence_submit: they chain audit entries with the same encoding and hash
// but sign no checkpoint and write no anchor. modernc.org/sqlite is a Go
// translation of SQLite's C source and is slower than the C library on CPU;
// the harness switches it to fdatasync, as SQLite's own Linux builds use.
//
// kvfence_submit_https runs the workers' client and the server in the
// process that holds the receiver, on the same Go scheduler. What it adds
// to kvfence_submit is CPU spent in parallel (TLS records, HTTP/1.1 on
// both sides, a write and at least one read system call per message each
// way, and the garbage all of that makes), but on few cores that work also
// delays the one serial path: the goroutine leading a group commit, back
// from each of its fdatasyncs, waits for a processor behind the serving
// goroutines, so fewer Submits queue per commit (fsyncs_per_op rises) and
// the rate falls by more than the added CPU alone explains. On two cores,
// GOMAXPROCS=4 brought this row's fsyncs_per_op back to kvfence_submit's:
// more processors than cores let the leader run as soon as its fdatasync
// returns. A deployment with the workers in other processes has the same
// effect on the server's scheduler; this row, with both ends in one, is
// the pessimistic case. The row's workers share one client.Client, whose
// Submits made while two of its requests are in flight go together in one
// request (POST /v1/submit/batch): at 64 writers that work is then paid
// once per batch rather than once per Submit, and at 1 writer, with
// nothing to batch, it is what it was.
//
// kvfence_submit_witnessed runs its three witnesses in the bench process,
// each the real witness (package witness) on its own loopback HTTPS server
// with its own bbolt file in the row's directory, which it fsyncs before
// it answers; the receiver reaches them through http.DefaultClient. The
// witnesses share the receiver's disk and processors, which a deployment
// would not: their fsyncs queue behind the receiver's on one disk. Each
// group commit's batch waits for the anchor write and then for one
// cosign round, in which all three are asked and the first two
// cosignatures end it.
package bench
