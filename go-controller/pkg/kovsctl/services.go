package kovsctl

import (
	"context"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// serviceNames names Service port flows by the object of their cookies
// (pipeline.ServiceObjectID of the port's name), e.g. "x/web:http/TCP".
type serviceNames map[uint32]string

// listServiceNames reads every Service and names its ports as kovs-agent does.
func (a Access) listServiceNames(ctx context.Context) (serviceNames, error) {
	list, err := a.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Services to name their flows in the trace: %w", err)
	}
	names := serviceNames{}
	for _, svc := range list.Items {
		for _, sp := range svc.Spec.Ports {
			port := sp.Name
			if port == "" {
				port = strconv.Itoa(int(sp.Port))
			}
			name := pipeline.ServicePortName(svc.Namespace, svc.Name, port, string(sp.Protocol))
			names[pipeline.ServiceObjectID(name)] = name
		}
	}
	return names, nil
}

// describeService names the owner of a Service flow.
func (o cookieOwners) describeService(c pipeline.Cookie) string {
	if c.Object() == 0 {
		return "Service hairpin (a pod reaching itself through a Service)"
	}
	if name, ok := o.services[c.Object()]; ok {
		return "Service " + name
	}
	return fmt.Sprintf("a Service port (cookie object %#x; no current Service port has this name hash)", c.Object())
}
