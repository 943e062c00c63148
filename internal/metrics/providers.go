package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ProviderState is one provider's health as the metrics show it.
type ProviderState struct {
	Name       string        // the provider and credentials: "claude/ab12cd34"
	Up         bool          // sessions start as they will (not rate limited, not down, not probing)
	RetryAfter time.Duration // a rate limit's or the breaker's hold left; 0 when none
}

// providerCollector reads the providers' health at each scrape: there is
// one series per provider an agent uses, and that set changes with reloads.
type providerCollector struct {
	read              func() []ProviderState
	up, retryAfterDsc *prometheus.Desc
}

func (c providerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.retryAfterDsc
}

func (c providerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.read() {
		up := 0.0
		if p.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, p.Name)
		ch <- prometheus.MustNewConstMetric(c.retryAfterDsc, prometheus.GaugeValue, max(p.RetryAfter, 0).Seconds(), p.Name)
	}
}

// Providers exports the health each provider's agents share: read is
// called at each scrape. Call it once.
func (m *Metrics) Providers(read func() []ProviderState) {
	m.reg.MustRegister(providerCollector{
		read: read,
		up: prometheus.NewDesc("swarmd_provider_up",
			"1 while the provider takes sessions; 0 while it is rate limited, down (the breaker open) or probed.", []string{"provider"}, nil),
		retryAfterDsc: prometheus.NewDesc("swarmd_provider_retry_after_seconds",
			"How long the provider's agents still wait: a rate limit's reset or the breaker's backoff; 0 when none.", []string{"provider"}, nil),
	})
}
