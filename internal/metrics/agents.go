package metrics

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/swarmd/swarmd/internal/agent"
)

// The per-agent metrics are plain values in a series per agent, exported by
// agentMetrics at scrape time, instead of a client_golang child per series:
// the 24 children of an agent (their label pairs, hash map entries and
// histogram) took about 10 KB, a third of a sleeping agent's heap.

// agentDescs are the per-agent metrics (docs/operations.md), in the order
// agentMetrics writes them.
type agentDescs struct {
	state, seq, consecutiveErrors, totalErrors, pending, idle, paused *prometheus.Desc
	sessions, duration, interrupts, forceStops                        *prometheus.Desc
}

func newAgentDescs() agentDescs {
	agentLabel := []string{"agent"}
	return agentDescs{
		state: prometheus.NewDesc("swarmd_agent_state",
			"1 for the agent's current state, 0 for the other seven.", []string{"agent", "state"}, nil),
		seq: prometheus.NewDesc("swarmd_agent_session_seq",
			"The agent's session sequence counter.", agentLabel, nil),
		consecutiveErrors: prometheus.NewDesc("swarmd_agent_consecutive_errors",
			"Failed sessions since a session last started or succeeded: reset when a session starts, so it counts failed starts in a row (a session that starts and fails leaves it at 1).", agentLabel, nil),
		idle: prometheus.NewDesc("swarmd_agent_idle",
			"1 while the agent waits in BuildingPrompt with nothing to do (it said DONE; no mail, no task).", agentLabel, nil),
		paused: prometheus.NewDesc("swarmd_agent_paused",
			"1 while the agent is paused (swarmd pause): no session starts until swarmd resume.", agentLabel, nil),
		totalErrors: prometheus.NewDesc("swarmd_agent_total_errors",
			"Sessions that ended in error or timeout since the agent started.", agentLabel, nil),
		sessions: prometheus.NewDesc("swarmd_sessions_total",
			"Backend sessions ended, by outcome.", []string{"agent", "outcome"}, nil),
		duration: prometheus.NewDesc("swarmd_session_duration_seconds",
			"Wall-clock duration of backend sessions.", agentLabel, nil),
		interrupts: prometheus.NewDesc("swarmd_interrupts_total",
			"Sessions interrupted by urgent mail.", agentLabel, nil),
		forceStops: prometheus.NewDesc("swarmd_force_stops_total",
			"Sessions force-stopped (SIGKILL) after ignoring a cancel.", agentLabel, nil),
		pending: prometheus.NewDesc("swarmd_mailbox_pending",
			"Undelivered messages per recipient.", agentLabel, nil),
	}
}

// series is one agent's values. Gauges and counters are atomic, so the hot
// path (OnTransition, in every runner goroutine) takes no lock but the
// state's.
type series struct {
	mu  sync.Mutex // orders state changes, so exactly one state reads 1; guards the duration
	cur agent.StateKind

	seq, consecutiveErrors, totalErrors, pending, idle, paused gauge
	sessions                                                   [len(outcomeLabels)]atomic.Uint64
	interrupts, forceStops                                     atomic.Uint64

	durCount   uint64
	durSum     float64
	durBuckets [len(sessionBuckets)]uint64 // observations per bucket, not cumulative
}

// gauge is a float64 set atomically.
type gauge struct{ bits atomic.Uint64 }

func (g *gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }
func (g *gauge) get() float64  { return math.Float64frombits(g.bits.Load()) }

func (s *series) setState(k agent.StateKind) {
	if int(k) >= len(agent.AllStates) {
		return
	}
	s.mu.Lock()
	s.cur = k
	s.mu.Unlock()
}

func (s *series) observeDuration(seconds float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.durCount++
	s.durSum += seconds
	for i, b := range sessionBuckets {
		if seconds <= b {
			s.durBuckets[i]++
			return
		}
	}
}

// agentMetrics is the collector of every agent's series.
type agentMetrics struct{ m *Metrics }

func (c agentMetrics) Describe(ch chan<- *prometheus.Desc) {
	d := &c.m.desc
	for _, x := range []*prometheus.Desc{d.state, d.seq, d.consecutiveErrors, d.totalErrors, d.pending, d.idle,
		d.paused, d.sessions, d.duration, d.interrupts, d.forceStops} {
		ch <- x
	}
}

func (c agentMetrics) Collect(ch chan<- prometheus.Metric) {
	d := &c.m.desc
	c.m.mu.RLock()
	defer c.m.mu.RUnlock()
	for name, s := range c.m.agents {
		self := []*dto.LabelPair{labelPair("agent", name)}
		s.mu.Lock()
		cur, count, sum, buckets := s.cur, s.durCount, s.durSum, s.durBuckets
		s.mu.Unlock()
		for _, k := range agent.AllStates {
			v := 0.0
			if k == cur {
				v = 1
			}
			ch <- value{d.state, []*dto.LabelPair{self[0], c.m.stateLabels[k]}, v, false}
		}
		ch <- value{d.seq, self, s.seq.get(), false}
		ch <- value{d.consecutiveErrors, self, s.consecutiveErrors.get(), false}
		ch <- value{d.totalErrors, self, s.totalErrors.get(), false}
		ch <- value{d.pending, self, s.pending.get(), false}
		ch <- value{d.idle, self, s.idle.get(), false}
		ch <- value{d.paused, self, s.paused.get(), false}
		for i := range outcomeLabels {
			ch <- value{d.sessions, []*dto.LabelPair{self[0], c.m.outcomeLabels[i]}, float64(s.sessions[i].Load()), true}
		}
		ch <- value{d.interrupts, self, float64(s.interrupts.Load()), true}
		ch <- value{d.forceStops, self, float64(s.forceStops.Load()), true}
		ch <- histogram{d.duration, self, count, sum, buckets}
	}
}

func labelPair(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: &name, Value: &value}
}

// value is one gauge or counter sample; labels are sorted by name.
type value struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	v       float64
	counter bool
}

func (v value) Desc() *prometheus.Desc { return v.desc }

func (v value) Write(out *dto.Metric) error {
	out.Label = v.labels
	x := v.v
	if v.counter {
		out.Counter = &dto.Counter{Value: &x}
	} else {
		out.Gauge = &dto.Gauge{Value: &x}
	}
	return nil
}

// histogram is one agent's swarmd_session_duration_seconds.
type histogram struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	count   uint64
	sum     float64
	buckets [len(sessionBuckets)]uint64
}

func (h histogram) Desc() *prometheus.Desc { return h.desc }

func (h histogram) Write(out *dto.Metric) error {
	out.Label = h.labels
	bs := make([]*dto.Bucket, len(sessionBuckets))
	var cum uint64
	for i := range bs {
		cum += h.buckets[i]
		n, le := cum, sessionBuckets[i]
		bs[i] = &dto.Bucket{CumulativeCount: &n, UpperBound: &le}
	}
	count, sum := h.count, h.sum
	out.Histogram = &dto.Histogram{SampleCount: &count, SampleSum: &sum, Bucket: bs}
	return nil
}
