package pin

import (
	"errors"
	"net"
	"testing"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
)

func TestInNetns(t *testing.T) {
	// This thread's namespace: f runs right here.
	here, err := CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := InNetns(here, func() error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("InNetns(this namespace) = %v, ran %v", err, ran)
	}
	// An inode that no namespace has.
	if err := InNetns(1, func() error { t.Error("f ran in no namespace"); return nil }); !errors.Is(err, ErrNetnsGone) {
		t.Errorf("InNetns(1) = %v, want ErrNetnsGone", err)
	}

	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface, err := p.A.Interface()
	if err != nil {
		t.Fatal(err)
	}
	var ns uint64
	if err := p.A.Do(func() error { ns, err = CurrentNetns(); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("f's own error")
	err = InNetns(ns, func() error {
		if got, err := CurrentNetns(); err != nil || got != ns {
			t.Errorf("f runs in namespace %d (%v), want %d", got, err, ns)
		}
		if _, err := net.InterfaceByName(iface); err != nil {
			t.Errorf("f does not see %s, the pair's interface: %v", iface, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("InNetns returned %v, want f's error", err)
	}
	if got, _ := CurrentNetns(); got != here {
		t.Errorf("after InNetns this thread is in namespace %d, want %d", got, here)
	}
}
