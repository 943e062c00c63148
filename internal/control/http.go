package control

import "net/http"

// HTTP is the client's HTTP client, which dials the socket: for protocols
// served beside the API, such as the read model under ViewPrefix.
func (c *Client) HTTP() *http.Client { return c.http }
