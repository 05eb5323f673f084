package e2e

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// waitForRuns waits until the witness of the allocation's `server` task has started `n`
// times, and returns its signals.
func waitForRuns(t *testing.T, a *agent, allocID string, n int) []record {
	t.Helper()
	waitUntil(t, "the task to run again", 20*time.Second, func() bool {
		starts := 0
		for _, r := range a.witness(allocID, "server") {
			if r.Event == "start" {
				starts++
			}
		}
		return starts == n
	})
	return a.signals(allocID, "server")
}

// invariant: services_restored
// Nomad's Go client restarts a task in place through Allocations().Restart. Unflagged, the
// task's 3 s delay is waited after its service is gone, and the group's service stays (a
// restart leaves the group alone); with quiesce's `no_shutdown_delay` query parameter the
// next restart comes at once. Each time the task runs again with its service back, and the
// stored job does not change.
func TestAllocationsRestartWaitsTheDelayUnlessTheQueryFlagSkipsIt(t *testing.T) {
	a := startAgent(t)
	const delay = 3 * time.Second
	allocID := a.register(webJob(t, "web", 10*time.Second, delay))
	before, _, err := a.client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	alloc, _, err := a.client.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	asked := monotonicNs()
	if err := a.client.Allocations().Restart(alloc, "server", nil); err != nil {
		t.Fatalf("restart: %v", err)
	}
	signals := waitForRuns(t, a, allocID, 2)
	if len(signals) != 1 || signals[0].Name != "SIGINT" {
		t.Fatalf("signals: %+v", signals)
	}
	took := time.Duration(signals[0].MonotonicNs - asked)
	if took < delay || took >= 10*time.Second {
		t.Errorf("the unflagged restart signalled after %v: not the task's 3 s delay alone", took)
	}
	if got := signals[0].Services; got["server-web"] != 0 || got["web-group"] != 1 {
		t.Errorf("services at the signal: %v (the task's gone, the group's kept)", got)
	}
	waitUntil(t, "the service back", 10*time.Second, func() bool {
		regs, _, err := a.client.Services().Get("server-web", nil)
		return err == nil && len(regs) == 1
	})

	asked = monotonicNs()
	flagged := &api.QueryOptions{Params: map[string]string{"no_shutdown_delay": "true"}}
	if err := a.client.Allocations().Restart(alloc, "server", flagged); err != nil {
		t.Fatalf("flagged restart: %v", err)
	}
	signals = waitForRuns(t, a, allocID, 3)
	if took := time.Duration(signals[1].MonotonicNs - asked); took >= delay/10 {
		t.Errorf("the flagged restart signalled after %v, within its 3 s delay", took)
	}
	// The program runs again before the client's report of it reaches the server: the
	// task state catches up within a moment.
	waitUntil(t, "the task state to count both restarts", 10*time.Second, func() bool {
		after, _, err := a.client.Allocations().Info(allocID, nil)
		if err != nil {
			t.Fatal(err)
		}
		state := after.TaskStates["server"]
		return state != nil && state.Restarts == 2 && state.State == "running"
	})
	job, _, err := a.client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, job) {
		t.Errorf("the stored job changed:\nbefore %+v\nafter  %+v", before, job)
	}
}
