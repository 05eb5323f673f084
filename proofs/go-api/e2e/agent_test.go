// Package e2e drives a real quiesce agent with Nomad's own Go client
// (github.com/hashicorp/nomad/api) and judges each stop by what the task experienced: the
// witness task (quiesce-witness) records, from inside the process, every signal it gets,
// when, and how many of its services the agent still listed at that moment.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/nomad/api"
)

// agent is one `quiesce agent -dev` on a free loopback port, over its own data dir.
type agent struct {
	t       *testing.T
	dataDir string
	address string
	cmd     *exec.Cmd
	client  *api.Client
}

func env(t *testing.T, name string) string {
	value := os.Getenv(name)
	if value == "" {
		t.Fatalf("%s is not set (proofs/go-api/run sets it)", name)
	}
	return value
}

// startAgent starts an agent and waits until its HTTP address is known and its node is
// ready. At cleanup it stops the agent, kills whatever task the test left running, and
// validates the agent's event log against the model (quiesce-conform validate-log).
func startAgent(t *testing.T, args ...string) *agent {
	t.Helper()
	a := &agent{t: t, dataDir: filepath.Join(t.TempDir(), "data")}
	a.cmd = exec.Command(env(t, "QUIESCE_BIN"),
		append([]string{"agent", "-dev", "-data-dir", a.dataDir, "-port", "0"}, args...)...)
	a.cmd.Env = cleanEnv()
	stderr, err := os.Create(a.dataDir + ".stderr")
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stderr = stderr
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	lines := bufio.NewScanner(stdout)
	ready := false
	for (a.address == "" || !ready) && lines.Scan() {
		line := lines.Text()
		if strings.Contains(line, "HTTP address:") {
			fields := strings.Fields(line)
			a.address = fields[len(fields)-1]
		}
		ready = ready || (strings.HasPrefix(line, "==> Node ") && strings.HasSuffix(line, " is ready"))
	}
	if a.address == "" || !ready {
		text, _ := os.ReadFile(a.dataDir + ".stderr")
		t.Fatalf("the agent did not start: %s", text)
	}
	go func() { // the rest of its stdout, so that it never blocks on a full pipe
		for lines.Scan() {
		}
	}()
	a.client = a.newClient("")
	return a
}

func cleanEnv() []string {
	var kept []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_") {
			kept = append(kept, kv)
		}
	}
	return kept
}

func (a *agent) newClient(token string) *api.Client {
	config := api.DefaultConfig()
	config.Address = a.address
	config.SecretID = token
	client, err := api.NewClient(config)
	if err != nil {
		a.t.Fatal(err)
	}
	return client
}

func (a *agent) close() {
	if a.cmd.Process != nil {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		_ = a.cmd.Wait()
	}
	// Tasks outlive the agent by design; whatever is left of this agent's is ended.
	marker := []byte("NOMAD_ALLOC_DIR=" + a.dataDir + "/")
	entries, _ := os.ReadDir("/proc")
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && strings.Contains(string(environ), string(marker)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	out, err := exec.Command(env(a.t, "QUIESCE_CONFORM"), "validate-log",
		filepath.Join(a.dataDir, "events.jsonl")).CombinedOutput()
	if err != nil {
		a.t.Errorf("the agent's event log does not validate: %v\n%s", err, out)
	}
}

// record is one line of the witness's stdout.
type record struct {
	Event       string         `json:"event"`
	Name        string         `json:"name"`
	MonotonicNs int64          `json:"monotonic_ns"`
	Services    map[string]int `json:"services"`
}

func (a *agent) witness(allocID, task string) []record {
	text, err := os.ReadFile(filepath.Join(a.dataDir, "alloc", allocID, task, "stdout.log"))
	if err != nil {
		return nil
	}
	var records []record
	for _, line := range strings.Split(string(text), "\n") {
		var r record
		if json.Unmarshal([]byte(line), &r) == nil {
			records = append(records, r)
		}
	}
	return records
}

func (a *agent) signals(allocID, task string) []record {
	var signals []record
	for _, r := range a.witness(allocID, task) {
		if r.Event == "signal" {
			signals = append(signals, r)
		}
	}
	return signals
}

// monotonicNs is CLOCK_MONOTONIC, the witness's clock.
func monotonicNs() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic,
		uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		panic(errno)
	}
	return ts.Nano()
}

// waitUntil polls `done` every 20 ms for up to `timeout`.
func waitUntil(t *testing.T, what string, timeout time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const second = int64(time.Second)

// webJob is a service job of one group: a group service and delay, and a witness task
// `server` with its own service and delay.
func webJob(t *testing.T, id string, groupDelay, taskDelay time.Duration) *api.Job {
	witness := env(t, "QUIESCE_WITNESS")
	job := api.NewServiceJob(id, id, "global", 50)
	group := api.NewTaskGroup("web", 1)
	group.ShutdownDelay = &groupDelay
	group.Services = []*api.Service{{Name: id + "-group", Provider: "nomad"}}
	task := api.NewTask("server", "raw_exec")
	task.Config = map[string]any{
		"command": witness,
		"args":    []string{"--services", id + "-group,server-" + id},
	}
	task.Env = map[string]string{"QUIESCE_AGENT": "http://" + "will-be-set"}
	task.ShutdownDelay = taskDelay
	task.Services = []*api.Service{{Name: "server-" + id, Provider: "nomad"}}
	group.AddTask(task)
	job.AddTaskGroup(group)
	return job
}

// register registers the job and waits, with blocking queries, until its one allocation's
// witness has started; returns the allocation's ID.
func (a *agent) register(job *api.Job) string {
	a.t.Helper()
	job.TaskGroups[0].Tasks[0].Env["QUIESCE_AGENT"] = a.address
	response, _, err := a.client.Jobs().Register(job, nil)
	if err != nil {
		a.t.Fatalf("register: %v", err)
	}
	if response.EvalID == "" {
		a.t.Fatal("register: no evaluation")
	}
	var allocID string
	index := uint64(0)
	deadline := time.Now().Add(20 * time.Second)
	for allocID == "" || len(a.witness(allocID, "server")) == 0 {
		if time.Now().After(deadline) {
			a.t.Fatalf("job %s: no running witness", *job.ID)
		}
		stubs, meta, err := a.client.Jobs().Allocations(*job.ID, false,
			&api.QueryOptions{WaitIndex: index, WaitTime: time.Second})
		if err != nil {
			a.t.Fatal(err)
		}
		index = meta.LastIndex
		for _, stub := range stubs {
			if stub.ClientStatus == "running" {
				allocID = stub.ID
			}
		}
		if allocID != "" && len(a.witness(allocID, "server")) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return allocID
}

// waitTerminal waits, with blocking queries, until the allocation is client-terminal or
// gone (purged).
func (a *agent) waitTerminal(allocID string) {
	a.t.Helper()
	index := uint64(0)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		alloc, meta, err := a.client.Allocations().Info(allocID,
			&api.QueryOptions{WaitIndex: index, WaitTime: 2 * time.Second})
		if err != nil && strings.Contains(err.Error(), "not found") {
			return
		}
		if err != nil {
			a.t.Fatal(err)
		}
		if alloc.ClientTerminalStatus() {
			return
		}
		index = meta.LastIndex
	}
	a.t.Fatalf("allocation %s did not finish", allocID)
}
