package control

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
)

// BudgetStatus is one row of `swarmd budget`: an agent's or the swarm's
// spend in its current window, against its limits (zero: none).
type BudgetStatus struct {
	Scope       string    `json:"scope"` // an agent's name, or "(swarm)"
	LimitUSD    float64   `json:"limit_usd,omitempty"`
	LimitTokens int64     `json:"limit_tokens,omitempty"`
	Window      string    `json:"window"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	SpentUSD    float64   `json:"spent_usd"`
	SpentTokens int64     `json:"spent_tokens"`
	// Percent is the larger share spent of the USD and token limits.
	Percent float64 `json:"percent"`
	Level   string  `json:"level"` // "under 80%", "80%", "95%", "exhausted"
	// Source says where the USD limit comes from: "config", or "set by
	// ACTOR" (swarmd budget set).
	Source string `json:"source,omitempty"`
	// Paused: the agent is paused because a budget ran out.
	Paused bool `json:"paused,omitempty"`
}

// BudgetSetRequest is `swarmd budget set AGENT|--swarm USD` (or --clear:
// back to the config's limit).
type BudgetSetRequest struct {
	Scope string  `json:"scope"`
	USD   float64 `json:"usd"`
	Clear bool    `json:"clear,omitempty"`
}

// BudgetAPI is what a daemon with budgets serves on /v1/budget. An API that
// implements it gets the routes.
type BudgetAPI interface {
	Budget(ctx context.Context) ([]BudgetStatus, error)
	// SetBudget sets (or clears) a runtime USD limit and returns the
	// budgets after it; an agent paused by its budget goes on if the new
	// limit allows it.
	SetBudget(ctx context.Context, req BudgetSetRequest) ([]BudgetStatus, error)
}

func routesBudget(mux *http.ServeMux, api BudgetAPI) {
	mux.HandleFunc("GET /v1/budget", func(w http.ResponseWriter, r *http.Request) {
		bs, err := api.Budget(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, bs)
	})
	mux.HandleFunc("POST /v1/budget", func(w http.ResponseWriter, r *http.Request) {
		var req BudgetSetRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "budget: bad request body: " + err.Error()})
			return
		}
		bs, err := api.SetBudget(r.Context(), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, bs)
	})
}

// Budget returns every budget's status.
func (c *Client) Budget(ctx context.Context) ([]BudgetStatus, error) {
	var out []BudgetStatus
	return out, c.do(ctx, http.MethodGet, "/v1/budget", nil, &out)
}

// SetBudget sets or clears a runtime limit (see BudgetAPI).
func (c *Client) SetBudget(ctx context.Context, req BudgetSetRequest) ([]BudgetStatus, error) {
	var out []BudgetStatus
	return out, c.doBody(ctx, http.MethodPost, "/v1/budget", nil, req, &out)
}
