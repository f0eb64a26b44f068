package cni

import (
	"context"
	"errors"
	"fmt"
)

// PodRef identifies a pod by the Kubernetes API's coordinates.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// String returns namespace/name, the way kubectl names pods.
func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// IsZero reports whether p names no pod (a DEL from a runtime that passed no pod).
func (p PodRef) IsZero() bool { return p == PodRef{} }

// Validate checks that p names a pod: namespace, name and UID.
func (p PodRef) Validate() error {
	var missing []string
	if p.Namespace == "" {
		missing = append(missing, "namespace")
	}
	if p.Name == "" {
		missing = append(missing, "name")
	}
	if p.UID == "" {
		missing = append(missing, "uid")
	}
	if len(missing) > 0 {
		return fmt.Errorf("pod %q lacks %v", p.String(), missing)
	}
	return nil
}

// IPConfig is one of the pod's addresses.
type IPConfig struct {
	// Address is the pod address with its prefix length, "10.244.1.5/24" or
	// "fd00:10:244:1::5/64".
	Address string `json:"address"`
	// Gateway is the next hop of the pod's default route for the address's family,
	// "10.244.1.1". Empty means no default route for that family.
	Gateway string `json:"gateway,omitempty"`
}

// RouteConfig is a route the pod gets in addition to the default route of each family.
type RouteConfig struct {
	// Dst is the destination prefix, "10.96.0.0/12".
	Dst string `json:"dst"`
	// GW is the next hop; empty means the Gateway of the pod address of the same family
	// (or, when that family has none, a route on the link).
	GW string `json:"gw,omitempty"`
}

// PodNetworkConfig is what the agent tells kovs-cni to configure in the pod.
type PodNetworkConfig struct {
	// IPs holds one address per family: IPv4, IPv6 or both.
	IPs []IPConfig `json:"ips"`
	// MAC is the pod interface's address, "0a:58:0a:f4:01:05".
	MAC string `json:"mac"`
	// Routes are extra routes; the default route per family comes from IPs' Gateway.
	Routes []RouteConfig `json:"routes,omitempty"`
	// MTU of both veth ends; it leaves room for the tunnel overhead.
	MTU int `json:"mtu"`
	// DisableTxChecksumOffload turns TX checksum offload off on the pod end (needed with
	// the userspace datapath: conntrack would see bad L4 checksums).
	DisableTxChecksumOffload bool `json:"disableTxChecksumOffload,omitempty"`
}

// AddRequest is CNI ADD as kovs-cni passes it to the agent, with the veth created: the
// agent allocates the pod's addresses and MAC, adds HostIfName to br-int as the pod's
// port and answers with what the pod end must be configured with.
type AddRequest struct {
	ContainerID string `json:"containerID"`
	// Netns is the path of the pod's network namespace, as the runtime passed it.
	Netns string `json:"netns"`
	// IfName is the interface name inside the pod, "eth0".
	IfName string `json:"ifName"`
	Pod    PodRef `json:"pod"`
	// HostIfName is the host end of the veth, in the agent's (the node's) namespace.
	HostIfName string `json:"hostIfName"`
}

// Validate checks the fields the agent relies on.
func (r AddRequest) Validate() error {
	if r.ContainerID == "" || r.IfName == "" || r.HostIfName == "" {
		return errors.New("add request needs containerID, ifName and hostIfName")
	}
	return r.Pod.Validate()
}

// AttachRequest asks the agent to verify that a pod's host veth end is plugged into
// br-int with its flows (Check).
type AttachRequest struct {
	ContainerID string `json:"containerID"`
	// Netns is the path of the pod's network namespace, as the runtime passed it.
	Netns string `json:"netns"`
	// IfName is the interface name inside the pod, "eth0".
	IfName string `json:"ifName"`
	Pod    PodRef `json:"pod"`
	// HostIfName is the host end of the veth, in the agent's (the node's) namespace.
	HostIfName string `json:"hostIfName"`
	// MAC and IPs are the pod interface's, as configured.
	MAC string     `json:"mac"`
	IPs []IPConfig `json:"ips"`
}

// Validate checks the fields the agent relies on.
func (r AttachRequest) Validate() error {
	if r.ContainerID == "" || r.IfName == "" || r.HostIfName == "" {
		return errors.New("attach request needs containerID, ifName and hostIfName")
	}
	if err := r.Pod.Validate(); err != nil {
		return err
	}
	if _, err := parseMAC(r.MAC); err != nil {
		return err
	}
	_, err := parseIPs(r.IPs)
	return err
}

// DetachRequest asks the agent to remove a sandbox's port. Pod is zero when the runtime
// passed no pod identity (some runtimes on DEL): the agent then finds the port by
// ContainerID and IfName alone.
type DetachRequest struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Pod         PodRef `json:"pod"`
}

// Validate checks that the request names an attachment.
func (r DetachRequest) Validate() error {
	if r.ContainerID == "" || r.IfName == "" {
		return errors.New("detach request needs containerID and ifName")
	}
	return nil
}

// Attachment is a sandbox's interface as the runtime knows it (CNI GC's valid list).
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// GCRequest lists the attachments the runtime still has; the agent removes every other
// pod port.
type GCRequest struct {
	ValidAttachments []Attachment `json:"validAttachments"`
}

// Validate checks that every attachment is named.
func (r GCRequest) Validate() error {
	for _, a := range r.ValidAttachments {
		if a.ContainerID == "" || a.IfName == "" {
			return fmt.Errorf("valid attachment %+v needs containerID and ifName", a)
		}
	}
	return nil
}

// Handler is the agent side of the protocol: Server decodes each request, calls the
// method and encodes its answer. Errors should be *Error (see Errorf) with a message for
// people; any other error is sent with CodeInternal, and a canceled or expired context
// with CodeTryAgainLater. Methods are called concurrently.
type Handler interface {
	// Add allocates the pod's addresses and MAC from the node's blocks (or returns those
	// the pod of that UID already holds), adds the host veth end to br-int as the pod's
	// port and returns the pod end's config once the pod's flows, and its NetworkPolicy,
	// are installed. No API server request is on its path.
	Add(ctx context.Context, req AddRequest) (*PodNetworkConfig, error)
	// Detach removes the sandbox's port and flows. Unknown sandboxes are success.
	Detach(ctx context.Context, req DetachRequest) error
	// Check verifies the sandbox's port and flows.
	Check(ctx context.Context, req AttachRequest) error
	// GC removes the ports of sandboxes not in valid.
	GC(ctx context.Context, valid []Attachment) error
	// Status returns nil when the agent is ready to serve pods, else an error
	// (CodeNotAvailable) saying why not.
	Status(ctx context.Context) error
}
