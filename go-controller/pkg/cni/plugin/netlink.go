package plugin

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// maxDumpAttempts bounds the retries of a netlink dump the kernel interrupted (it sets
// NLM_F_DUMP_INTR when the table changed during the dump, and the answer may be partial).
const maxDumpAttempts = 5

// retryInterrupted calls dump until it is not interrupted, at most maxDumpAttempts times.
func retryInterrupted[T any](dump func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || attempt == maxDumpAttempts {
			return v, err
		}
	}
}

// linkByName looks a link up in the calling thread's namespace.
func linkByName(name string) (netlink.Link, error) {
	return retryInterrupted(func() (netlink.Link, error) { return netlink.LinkByName(name) })
}

// addrList lists link's addresses of every family.
func addrList(link netlink.Link) ([]netlink.Addr, error) {
	return retryInterrupted(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
}

// routeList lists link's routes of every family in the main table.
func routeList(link netlink.Link) ([]netlink.Route, error) {
	return retryInterrupted(func() ([]netlink.Route, error) { return netlink.RouteList(link, netlink.FAMILY_ALL) })
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// deleteLinkByName deletes a link of the calling thread's namespace; a missing link is
// success. Deleting either end of a veth deletes both.
func deleteLinkByName(name string) error {
	link, err := linkByName(name)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// openPodNetNS opens the pod's network namespace, saying so when it is gone.
func openPodNetNS(path string) (ns.NetNS, error) {
	podNS, err := ns.GetNS(path)
	switch {
	case err == nil:
		return podNS, nil
	case isNetNSGone(err):
		return nil, withCode(types.ErrInvalidNetNS, fmt.Errorf("netns %s is gone: %w", path, err))
	default:
		return nil, withCode(types.ErrInvalidNetNS, fmt.Errorf("open netns %s: %w", path, err))
	}
}

// isNetNSGone reports whether err says the netns path no longer exists or no longer is a
// namespace (runtimes unmount it and may leave the empty file).
func isNetNSGone(err error) bool {
	var missing ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	return errors.As(err, &missing) || errors.As(err, &notNS)
}
