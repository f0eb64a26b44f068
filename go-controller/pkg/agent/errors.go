package agent

import "errors"

var errNodeNotConfigured = errors.New("node configuration not known yet (waiting for the node's subnets from kovs-controller)")
