package stream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ServicePrefix introduces a controller address that names a Service rather than a
// host:port: "service:kube-system/kovs-controller".
const ServicePrefix = "service:"

// StreamPortName is the name of the policy stream's port on the controller's Service.
const StreamPortName = "policy-stream"

// ParseServiceAddress reads "service:NAMESPACE/NAME"; ok is false for a plain host:port.
func ParseServiceAddress(address string) (namespace, name string, ok bool, err error) {
	rest, found := strings.CutPrefix(address, ServicePrefix)
	if !found {
		return "", "", false, nil
	}
	namespace, name, _ = strings.Cut(rest, "/")
	if namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", true, fmt.Errorf("controller address %q: use %sNAMESPACE/NAME", address, ServicePrefix)
	}
	return namespace, name, true, nil
}

// ServiceDialer dials the ready endpoints of a Service's port portName, read from its
// EndpointSlices on every dial: the agent runs on the host network, before any Service
// proxy or cluster DNS works on the node, so it cannot use the Service's name or
// ClusterIP. The addr it is asked to dial is ignored. prefer, if set, names the pod to
// dial first (the leading replica's: a hung leader's pod stays a ready endpoint, labelled,
// until its readiness probe fails, and a connection to it opens and then hears nothing).
func ServiceDialer(client kubernetes.Interface, namespace, service, portName string, prefer func() string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		targets, err := serviceEndpoints(ctx, client, namespace, service, portName)
		if err != nil {
			return nil, err
		}
		if prefer != nil {
			if pod := prefer(); pod != "" {
				slices.SortStableFunc(targets, func(a, b endpointTarget) int {
					switch {
					case a.pod == pod && b.pod != pod:
						return -1
					case b.pod == pod && a.pod != pod:
						return 1
					}
					return 0
				})
			}
		}
		var errs []error
		for _, t := range targets {
			c, err := dial(ctx, network, t.addr)
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
}

// endpointTarget is one ready endpoint: its host:port and the pod behind it ("" if none).
type endpointTarget struct{ addr, pod string }

// serviceEndpoints lists every ready endpoint of the Service's named port.
func serviceEndpoints(ctx context.Context, client kubernetes.Interface, namespace, service, portName string) ([]endpointTarget, error) {
	list, err := client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil, fmt.Errorf("endpoints of Service %s/%s: %w", namespace, service, err)
	}
	var out []endpointTarget
	for _, s := range list.Items {
		port := slicePort(s.Ports, portName)
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			pod := ""
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
				pod = ep.TargetRef.Name
			}
			for _, a := range ep.Addresses {
				out = append(out, endpointTarget{addr: net.JoinHostPort(a, strconv.Itoa(int(port))), pod: pod})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ready endpoint of Service %s/%s with a port named %q (is kovs-controller running, and its leader pod labelled %s?)",
			namespace, service, portName, "kovs.io/leader")
	}
	return out, nil
}

func slicePort(ports []discoveryv1.EndpointPort, name string) int32 {
	for _, p := range ports {
		if p.Name != nil && *p.Name == name && p.Port != nil {
			return *p.Port
		}
	}
	return 0
}
