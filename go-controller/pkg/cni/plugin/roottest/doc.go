// Package roottest holds the kovs-cni tests that need root: they create network
// namespaces (`ip netns add kovs-cnit-...`) and veths, and run the plugin's commands
// in-process from a namespace standing for the node, against a fake kovs-agent served on
// a temporary socket. Without root they skip.
package roottest
