package e2e

// The field comparison (issue 25, build 2): every object the agent serves, decoded as raw
// JSON and set against the matching struct of github.com/hashicorp/nomad/api by reflection
// over the pinned package. Every field of the struct is a key of the object, and every key
// of the object is a field of the struct; each value decodes into its field's type. The
// differences that are deliberate are listed in ARCHITECTURE.md ("Deliberate differences
// in the API's objects"), each with its reason; the test reads that list, and fails on a
// difference not in it and on an entry of it that no longer happens.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// A difference: `Type.Field` (Go's type name, the JSON key), and which way it differs.
type difference struct {
	at   string // e.g. "TaskGroup.Scaling"
	kind string // "missing" (the struct has it, the object not) or "extra"
}

func (d difference) String() string { return d.at + " " + d.kind }

// comparer walks a decoded object against a type, collecting differences once per
// `Type.Field` however often the type occurs.
type comparer struct {
	found    map[difference]string // the first JSON path it was seen at
	badValue []string
}

var timeType = reflect.TypeOf(time.Time{})

// fields: the JSON keys of a struct type and their types, embedded structs flattened, as
// encoding/json sees them.
func fields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			first := strings.Split(tag, ",")[0]
			if first == "-" {
				continue
			}
			if first != "" {
				name = first
			}
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			if _, tagged := f.Tag.Lookup("json"); !tagged {
				for k, v := range fields(f.Type) {
					out[k] = v
				}
				continue
			}
		}
		out[name] = f.Type
	}
	return out
}

func (c *comparer) compare(path string, raw json.RawMessage, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if string(raw) == "null" {
		return
	}
	switch {
	case t == timeType:
		return
	case t.Kind() == reflect.Struct:
		var object map[string]json.RawMessage
		if err := json.Unmarshal(raw, &object); err != nil {
			c.badValue = append(c.badValue, fmt.Sprintf("%s: %s is not an object of %s", path, short(raw), t.Name()))
			return
		}
		want := fields(t)
		for key, ft := range want {
			value, ok := object[key]
			if !ok {
				c.note(difference{t.Name() + "." + key, "missing"}, path)
				continue
			}
			if err := json.Unmarshal(value, reflect.New(ft).Interface()); err != nil {
				c.badValue = append(c.badValue, fmt.Sprintf("%s.%s: %s does not decode into %s: %v",
					path, key, short(value), ft, err))
				continue
			}
			c.compare(path+"."+key, value, ft)
		}
		for key := range object {
			if _, ok := want[key]; !ok {
				c.note(difference{t.Name() + "." + key, "extra"}, path)
			}
		}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			for _, item := range items {
				c.compare(path+"[]", item, t.Elem())
			}
		}
	case t.Kind() == reflect.Map:
		var items map[string]json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			for _, item := range items {
				c.compare(path+"{}", item, t.Elem())
			}
		}
	}
}

func (c *comparer) note(d difference, path string) {
	if _, seen := c.found[d]; !seen {
		c.found[d] = path
	}
}

func short(raw json.RawMessage) string {
	if len(raw) > 80 {
		return string(raw[:80]) + "…"
	}
	return string(raw)
}

// deliberate reads ARCHITECTURE.md's list: lines "- `Type.Field` missing|extra: reason".
func deliberate(t *testing.T) map[difference]string {
	path := filepath.Join("..", "..", "..", "ARCHITECTURE.md")
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const heading = "### Deliberate differences in the API's objects"
	_, section, ok := strings.Cut(string(text), heading)
	if !ok {
		t.Fatalf("%s has no section %q", path, heading)
	}
	section, _, _ = strings.Cut(section, "\n#")
	entry := regexp.MustCompile("(?m)^- `([A-Za-z]+\\.[A-Za-z]+)` (missing|extra): (.+)$")
	out := map[difference]string{}
	for _, m := range entry.FindAllStringSubmatch(section, -1) {
		out[difference{m[1], m[2]}] = m[3]
	}
	if len(out) == 0 {
		t.Fatalf("the section %q of %s lists nothing", heading, path)
	}
	return out
}

// get is a GET's raw body, which must be a 200.
func (a *agent) get(t *testing.T, path string) json.RawMessage {
	t.Helper()
	response, err := http.Get(a.address + path)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	if response.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, response.StatusCode, body)
	}
	return body
}

// events reads the event stream from the first index for `for_` and returns every event
// as raw JSON, with its topic.
func (a *agent) events(t *testing.T, within time.Duration) []json.RawMessage {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	request, _ := http.NewRequestWithContext(ctx, "GET", a.address+"/v1/event/stream?index=1", nil)
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	var events []json.RawMessage
	lines := bufio.NewScanner(response.Body)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	for lines.Scan() {
		var frame struct{ Events []json.RawMessage }
		if json.Unmarshal(lines.Bytes(), &frame) == nil {
			events = append(events, frame.Events...)
		}
	}
	return events
}

func TestEveryObjectHasNomadsFieldsAndNoOthers(t *testing.T) {
	a := startAgent(t)
	job := webJob(t, "web", 0, 0)
	allocID := a.register(job)
	// A stopped and a running job, so that each kind of record has been written.
	other := webJob(t, "other", 0, 0)
	otherAlloc := a.register(other)
	if _, _, err := a.client.Jobs().DeregisterOpts("other", &api.DeregisterOptions{NoShutdownDelay: true}, nil); err != nil {
		t.Fatal(err)
	}
	a.waitTerminal(otherAlloc)

	// A scaling event (an error report: no count, which the running deployment would
	// refuse), so the scale status has one to compare.
	if _, _, err := a.client.Jobs().Scale("web", "web", nil, "a report", true,
		map[string]any{"by": "fields"}, nil); err != nil {
		t.Fatal(err)
	}

	var evalID string
	{
		var evals []struct{ ID string }
		must(t, json.Unmarshal(a.get(t, "/v1/job/web/evaluations"), &evals))
		evalID = evals[0].ID
	}
	var nodeID string
	{
		var nodes []struct{ ID string }
		must(t, json.Unmarshal(a.get(t, "/v1/nodes"), &nodes))
		nodeID = nodes[0].ID
	}
	served := []struct {
		path string
		as   any
	}{
		{"/v1/jobs", []api.JobListStub{}},
		{"/v1/job/web", api.Job{}},
		{"/v1/job/other", api.Job{}},
		{"/v1/job/web/summary", api.JobSummary{}},
		{"/v1/job/web/versions", versions{}},
		{"/v1/job/web/scale", api.JobScaleStatusResponse{}},
		{"/v1/job/web/allocations", []api.AllocationListStub{}},
		{"/v1/job/web/evaluations", []api.Evaluation{}},
		{"/v1/job/web/services", []api.ServiceRegistration{}},
		{"/v1/allocations", []api.AllocationListStub{}},
		{"/v1/allocations?resources=true", []api.AllocationListStub{}},
		{"/v1/allocation/" + allocID, api.Allocation{}},
		{"/v1/allocation/" + otherAlloc, api.Allocation{}},
		{"/v1/evaluations", []api.Evaluation{}},
		{"/v1/evaluation/" + evalID, api.Evaluation{}},
		{"/v1/nodes", []api.NodeListStub{}},
		{"/v1/nodes?resources=true", []api.NodeListStub{}},
		{"/v1/node/" + nodeID, api.Node{}},
		{"/v1/node/" + nodeID + "/allocations", []api.Allocation{}},
		{"/v1/services", []api.ServiceRegistrationListStub{}},
		{"/v1/service/server-web", []api.ServiceRegistration{}},
		{"/v1/namespaces", []api.Namespace{}},
		{"/v1/operator/raft/configuration", api.RaftConfiguration{}},
		{"/v1/client/allocation/" + allocID + "/stats", api.AllocResourceUsage{}},
	}
	c := &comparer{found: map[difference]string{}}
	for _, s := range served {
		c.compare(s.path, a.get(t, s.path), reflect.TypeOf(s.as))
	}
	// The event stream: each event, and its payload by topic.
	payloads := map[string]reflect.Type{
		"Job":        reflect.TypeOf(api.Job{}),
		"Allocation": reflect.TypeOf(api.Allocation{}),
		"Evaluation": reflect.TypeOf(api.Evaluation{}),
		"Node":       reflect.TypeOf(api.Node{}),
		"Service":    reflect.TypeOf(api.ServiceRegistration{}),
		"Deployment": reflect.TypeOf(api.Deployment{}),
	}
	topics := map[string]int{}
	for _, raw := range a.events(t, 2*time.Second) {
		var event struct {
			Topic   string
			Payload map[string]json.RawMessage
		}
		must(t, json.Unmarshal(raw, &event))
		envelope := raw
		c.compare("event", envelope, reflect.TypeOf(eventEnvelope{}))
		topics[event.Topic]++
		for key, payload := range event.Payload {
			if typ, ok := payloads[key]; ok {
				c.compare("event "+event.Topic+"."+key, payload, typ)
			} else {
				c.note(difference{"Event.Payload." + key, "extra"}, "event "+event.Topic)
			}
		}
	}
	for _, topic := range []string{"Job", "Allocation", "Evaluation", "Node", "Service"} {
		if topics[topic] == 0 {
			t.Errorf("the event stream had no %s event to compare: %v", topic, topics)
		}
	}

	for _, bad := range c.badValue {
		t.Error(bad)
	}
	listed := deliberate(t)
	var unlisted, stale []string
	for d, at := range c.found {
		if _, ok := listed[d]; !ok {
			unlisted = append(unlisted, fmt.Sprintf("%s (at %s)", d, at))
		}
	}
	for d := range listed {
		if _, ok := c.found[d]; !ok {
			stale = append(stale, d.String())
		}
	}
	sort.Strings(unlisted)
	sort.Strings(stale)
	if len(unlisted) > 0 {
		t.Errorf("%d differences from Nomad's api structs, not among the deliberate ones in ARCHITECTURE.md:\n  %s",
			len(unlisted), strings.Join(unlisted, "\n  "))
	}
	if len(stale) > 0 {
		t.Errorf("listed as deliberate in ARCHITECTURE.md, but no longer a difference:\n  %s",
			strings.Join(stale, "\n  "))
	}
	t.Logf("compared %d endpoints and %d events; %d deliberate differences", len(served),
		sumValues(topics), len(listed))
}

// versions is api.JobVersionsResponse but for the api's QueryMeta, which the client fills
// from the headers (Nomad's body carries its server's QueryMeta, whose keys differ).
type versions struct {
	Versions []*api.Job
	Diffs    []*api.JobDiff
}

// eventEnvelope is api.Event but for its payload, compared by topic.
type eventEnvelope = api.Event

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
