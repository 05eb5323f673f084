package e2e

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The delays the flagged stops skip: 20 s in all, so that a stop that waited any part of
// them is at least ten times slower than the bound the tests assert (2 s).
const (
	groupDelay  = 10 * time.Second
	taskDelay   = 10 * time.Second
	flaggedUpTo = 2 * time.Second
)

// checkOneKill asserts the witness got exactly one kill signal (SIGINT), after its
// services were gone, and returns when (CLOCK_MONOTONIC ns).
func checkOneKill(t *testing.T, a *agent, allocID string) int64 {
	t.Helper()
	return checkKill(t, a, allocID, true)
}

// checkKill is checkOneKill; `watched` says whether the witness could ask the agent for
// the services (it cannot with ACLs on: tasks get no token).
func checkKill(t *testing.T, a *agent, allocID string, watched bool) int64 {
	t.Helper()
	signals := a.signals(allocID, "server")
	if len(signals) != 1 || signals[0].Name != "SIGINT" {
		t.Fatalf("the task got %+v, not one SIGINT", signals)
	}
	for name, count := range signals[0].Services {
		if count != 0 {
			t.Errorf("service %s still had %d registrations when the task was signalled", name, count)
		}
	}
	if watched && len(signals[0].Services) != 2 {
		t.Errorf("the witness watched %v, not both services", signals[0].Services)
	}
	return signals[0].MonotonicNs
}

// The stored job is the same before and after a stop, but for Stop, the version and the
// indexes (the invariant jobspec_unchanged, seen through the Go client's types).
func checkSpecUnchanged(t *testing.T, before, after *api.Job) {
	t.Helper()
	strip := func(job api.Job) api.Job {
		job.Stop, job.Version, job.Status, job.StatusDescription = nil, nil, nil, nil
		job.ModifyIndex, job.JobModifyIndex, job.SubmitTime, job.Stable = nil, nil, nil, nil
		return job
	}
	b, a := strip(*before), strip(*after)
	if !reflect.DeepEqual(b, a) {
		t.Errorf("the stored job changed:\nbefore %+v\nafter  %+v", b, a)
	}
	if after.Stop == nil || !*after.Stop || *after.Version != *before.Version+1 {
		t.Errorf("after the stop: Stop %v, version %v (before %v)", after.Stop, *after.Version, *before.Version)
	}
	if *after.TaskGroups[0].ShutdownDelay != groupDelay || after.TaskGroups[0].Tasks[0].ShutdownDelay != taskDelay {
		t.Errorf("the stored delays changed: group %v, task %v",
			*after.TaskGroups[0].ShutdownDelay, after.TaskGroups[0].Tasks[0].ShutdownDelay)
	}
}

// invariant: flag_is_honoured
func TestDeregisterWithNoShutdownDelaySkipsEveryDelay(t *testing.T) {
	a := startAgent(t)
	allocID := a.register(webJob(t, "web", groupDelay, taskDelay))
	before, _, err := a.client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	asked := monotonicNs()
	evalID, meta, err := a.client.Jobs().DeregisterOpts("web",
		&api.DeregisterOptions{NoShutdownDelay: true}, nil)
	if err != nil || evalID == "" || meta.LastIndex == 0 {
		t.Fatalf("deregister: %q, %+v, %v", evalID, meta, err)
	}
	a.waitTerminal(allocID)
	signalled := checkOneKill(t, a, allocID)
	if took := time.Duration(signalled - asked); took > flaggedUpTo {
		t.Errorf("the task was signalled %v after the flagged stop (delays %v + %v)", took, groupDelay, taskDelay)
	}
	after, _, err := a.client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSpecUnchanged(t, before, after)
	alloc, _, err := a.client.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !alloc.DesiredTransition.ShouldIgnoreShutdownDelay() || alloc.DesiredStatus != "stop" {
		t.Errorf("the allocation: desired %q, transition %+v", alloc.DesiredStatus, alloc.DesiredTransition)
	}
	for _, event := range alloc.TaskStates["server"].Events {
		if event.Type == "Waiting for shutdown delay" {
			t.Errorf("the task waited its delay: %+v", event)
		}
	}
}

// invariant: flag_scoped
func TestAllocStopWithNoShutdownDelaySkipsTheDelaysOfThatAllocationOnly(t *testing.T) {
	a := startAgent(t)
	flagged := a.register(webJob(t, "flagged", groupDelay, taskDelay))
	other := a.register(webJob(t, "other", 0, time.Second))
	stub, _, err := a.client.Allocations().Info(flagged, nil)
	if err != nil {
		t.Fatal(err)
	}
	asked := monotonicNs()
	stopped, err := a.client.Allocations().Stop(stub,
		&api.QueryOptions{Params: map[string]string{"no_shutdown_delay": "true"}})
	if err != nil || stopped.EvalID == "" {
		t.Fatalf("alloc stop: %+v, %v", stopped, err)
	}
	waitUntil(t, "the flagged allocation's kill", 10*time.Second, func() bool {
		return len(a.signals(flagged, "server")) > 0
	})
	signalled := checkOneKill(t, a, flagged)
	if took := time.Duration(signalled - asked); took > flaggedUpTo {
		t.Errorf("signalled %v after the flagged alloc stop", took)
	}
	// Its replacement does not carry the flag (flag_scoped).
	var replacement *api.Allocation
	waitUntil(t, "the replacement", 10*time.Second, func() bool {
		stopped, _, err := a.client.Allocations().Info(flagged, nil)
		if err != nil || stopped.NextAllocation == "" {
			return false
		}
		replacement, _, err = a.client.Allocations().Info(stopped.NextAllocation, nil)
		return err == nil
	})
	if replacement.DesiredTransition.ShouldIgnoreShutdownDelay() {
		t.Errorf("the replacement carries the flag: %+v", replacement.DesiredTransition)
	}
	// The other job's allocation is untouched, and its own later stop, unflagged, waits
	// its delay after its services are gone.
	if signals := a.signals(other, "server"); len(signals) != 0 {
		t.Fatalf("the other allocation was signalled: %+v", signals)
	}
	asked = monotonicNs()
	if _, _, err := a.client.Jobs().Deregister("other", false, nil); err != nil {
		t.Fatal(err)
	}
	a.waitTerminal(other)
	signalled = checkOneKill(t, a, other)
	if took := time.Duration(signalled - asked); took < time.Second {
		t.Errorf("the unflagged stop signalled after %v, inside its 1 s delay", took)
	}
}

func TestPurgeWithNoShutdownDelay(t *testing.T) {
	a := startAgent(t)
	allocID := a.register(webJob(t, "web", groupDelay, taskDelay))
	asked := monotonicNs()
	if _, _, err := a.client.Jobs().DeregisterOpts("web",
		&api.DeregisterOptions{Purge: true, NoShutdownDelay: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.client.Jobs().Info("web", nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("the purged job: %v", err)
	}
	waitUntil(t, "the purged allocation's kill", 10*time.Second, func() bool {
		return len(a.signals(allocID, "server")) > 0
	})
	signalled := checkOneKill(t, a, allocID)
	if took := time.Duration(signalled - asked); took > flaggedUpTo {
		t.Errorf("signalled %v after the flagged purge", took)
	}
	a.waitTerminal(allocID)
}

// A blocking query with WaitIndex returns once the index passes it, with the write's
// result, and not before.
func TestBlockingQueriesWaitForTheNextWrite(t *testing.T) {
	a := startAgent(t)
	allocID := a.register(webJob(t, "web", 0, 0))
	_, meta, err := a.client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		alloc *api.Allocation
		meta  *api.QueryMeta
		err   error
	}
	alloc, allocMeta, err := a.client.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan answer, 1)
	go func() {
		alloc, meta, err := a.client.Allocations().Info(allocID,
			&api.QueryOptions{WaitIndex: allocMeta.LastIndex, WaitTime: 30 * time.Second})
		answered <- answer{alloc, meta, err}
	}()
	select {
	case early := <-answered:
		t.Fatalf("answered before any write: %+v", early)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := a.client.Allocations().Stop(alloc,
		&api.QueryOptions{Params: map[string]string{"no_shutdown_delay": "true"}}); err != nil {
		t.Fatal(err)
	}
	got := <-answered
	if got.err != nil || got.meta.LastIndex <= allocMeta.LastIndex || got.alloc.DesiredStatus != "stop" {
		t.Fatalf("the blocked read: %+v, %v", got.meta, got.err)
	}
	if got.meta.LastIndex <= meta.LastIndex {
		t.Errorf("index %d not past the job's %d", got.meta.LastIndex, meta.LastIndex)
	}
	a.waitTerminal(allocID)
	checkOneKill(t, a, allocID)
}

func TestACLTokensGateTheStop(t *testing.T) {
	a := startAgent(t, "-acl-enabled")
	management, _, err := a.client.ACLTokens().Bootstrap(nil)
	if err != nil {
		t.Fatal(err)
	}
	root := a.newClient(management.SecretID)
	policy := &api.ACLPolicy{Name: "deployer", Rules: `namespace "default" { policy = "write" }`}
	if _, err := root.ACLPolicies().Upsert(policy, nil); err != nil {
		t.Fatal(err)
	}
	reader := &api.ACLPolicy{Name: "reader", Rules: `namespace "default" { policy = "read" }`}
	if _, err := root.ACLPolicies().Upsert(reader, nil); err != nil {
		t.Fatal(err)
	}
	token := func(policy string) *api.Client {
		created, _, err := root.ACLTokens().Create(
			&api.ACLToken{Name: policy, Type: "client", Policies: []string{policy}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a.newClient(created.SecretID)
	}
	deployer, readOnly := token("deployer"), token("reader")
	if _, _, err := a.client.Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("anonymous list: %v", err)
	}
	a.client = deployer
	allocID := a.register(webJob(t, "web", groupDelay, taskDelay))
	if _, _, err := readOnly.Jobs().DeregisterOpts("web",
		&api.DeregisterOptions{NoShutdownDelay: true}, nil); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("a read-only token stopped the job: %v", err)
	}
	if signals := a.signals(allocID, "server"); len(signals) != 0 {
		t.Fatalf("the refused stop signalled the task: %+v", signals)
	}
	asked := monotonicNs()
	if _, _, err := deployer.Jobs().DeregisterOpts("web",
		&api.DeregisterOptions{NoShutdownDelay: true}, nil); err != nil {
		t.Fatal(err)
	}
	a.waitTerminal(allocID)
	if took := time.Duration(checkKill(t, a, allocID, false) - asked); took > flaggedUpTo {
		t.Errorf("signalled %v after the deployer's flagged stop", took)
	}
}
