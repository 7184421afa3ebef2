package bench_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/kvfence/kvfence/bench"
)

// Run measures the chosen rows in one directory, so on one disk, and the
// rows are read as ratios of each other. Rates vary from run to run; what
// a row is does not.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "bench-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	rep, err := bench.Run(context.Background(), bench.Options{Dir: dir, Writers: []int{1, 2},
		Duration: 20 * time.Millisecond, Rows: []string{bench.RowFdatasync, bench.RowSubmit}})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rep.Results {
		fmt.Println(r.Name, "writers", r.Writers, "durable", r.Durable, "measured", r.Ops > 0 && r.OpsPerSec > 0)
	}
	// Output:
	// fdatasync writers 1 durable true measured true
	// fdatasync writers 2 durable true measured true
	// kvfence_submit writers 1 durable true measured true
	// kvfence_submit writers 2 durable true measured true
}
