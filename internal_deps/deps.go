//go:build tools

// Package deps pins the modules kovs builds on until code imports them.
package deps

import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/cni/pkg/types/100"
	_ "github.com/containernetworking/plugins/pkg/ip"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/digitalocean/go-openvswitch/ovs"
	_ "github.com/ovn-kubernetes/libovsdb/client"
	_ "github.com/ovn-kubernetes/libovsdb/model"
	_ "github.com/sirupsen/logrus"
	_ "github.com/vishvananda/netlink"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/client-go/util/workqueue"
	_ "k8s.io/client-go/tools/record"
)
