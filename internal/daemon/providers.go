package daemon

import (
	"time"

	"github.com/swarmd/swarmd/internal/backend"
)

// releaseStuckAfter is how long a provider's breaker stays open before the
// sessions still retrying against it are ended: a blip passes within the
// CLIs' own first retries, and a session that rides one out keeps its
// context; past this, its CLI's backoff (up to half a minute) would start
// it only well after the provider is back, while one probe at a time finds
// the provider back and the others start at once.
const releaseStuckAfter = 15 * time.Second

// releaseStuck ends, once each, the sessions that keep retrying against a
// provider down for releaseStuckAfter (the health watch calls it). The
// session is recorded as its provider's trouble (no error counted); its
// mail and task come back in its agent's next prompt.
func (d *Daemon) releaseStuck(now time.Time) {
	for _, name := range d.gates.providers.Stuck(now, releaseStuckAfter) {
		r, err := d.reg.Runner(name)
		if err != nil {
			continue // removed by a reload meanwhile
		}
		r.Abort(backend.AbortProviderError, "its provider has been down for over "+releaseStuckAfter.String()+
			" and its CLI keeps retrying: the agent waits for the provider's probe instead")
	}
}
