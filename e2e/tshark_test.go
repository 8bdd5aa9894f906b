package e2e

// The INT option as a decoder the project did not write sees it: packets
// captured on the receiver's and the sender's wire are written to a pcap
// file and dissected by tshark, whose generic RFC 6994 dissector shows the
// ExID and the option's data as bytes. Both must match what the Go codec
// decoded from the same packets.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/telemetry"
	"github.com/ccload/ccload/telemetry/sockops"
)

// pcap file format constants: the classic (microsecond) libpcap format with
// Ethernet link-layer headers.
const (
	pcapMagic       = 0xa1b2c3d4
	pcapLinkEther   = 1
	pcapSnapLen     = 262144
	pcapGlobalBytes = 24
	pcapRecordBytes = 16
)

// writePcap writes frames to path as a libpcap file, one microsecond apart.
func writePcap(path string, frames [][]byte) error {
	var b bytes.Buffer
	hdr := make([]byte, pcapGlobalBytes)
	binary.LittleEndian.PutUint32(hdr[0:], pcapMagic)
	binary.LittleEndian.PutUint16(hdr[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], pcapSnapLen)
	binary.LittleEndian.PutUint32(hdr[20:], pcapLinkEther)
	b.Write(hdr)
	for i, f := range frames {
		rec := make([]byte, pcapRecordBytes)
		binary.LittleEndian.PutUint32(rec[0:], uint32(i/1e6))
		binary.LittleEndian.PutUint32(rec[4:], uint32(i%1e6))
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(f)))
		b.Write(rec)
		b.Write(f)
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// tsharkOption is what tshark reported for one frame's experimental
// option.
type tsharkOption struct {
	exid uint16
	data []byte
}

// tsharkOptions runs tshark on a pcap file and returns, per frame number
// (1-based), the experimental (kind 253) options it dissected.
func tsharkOptions(t *testing.T, pcap string) map[int][]tsharkOption {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tshark", "-n", "-r", pcap, "-T", "fields",
		"-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "frame.number", "-e", "tcp.options.experimental.exid", "-e", "tcp.options.experimental.data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v: %s", pcap, err, stderr.String())
	}
	got := map[int][]tsharkOption{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "|")
		if len(fields) != 3 || fields[1] == "" {
			continue
		}
		n, err := strconv.Atoi(fields[0])
		if err != nil {
			t.Fatalf("tshark printed %q: %v", sc.Text(), err)
		}
		exids, datas := strings.Split(fields[1], ","), strings.Split(fields[2], ",")
		if len(exids) != len(datas) {
			t.Fatalf("tshark printed %d ExIDs but %d data fields: %q", len(exids), len(datas), sc.Text())
		}
		for i := range exids {
			id, err := strconv.ParseUint(strings.TrimPrefix(exids[i], "0x"), 16, 16)
			if err != nil {
				t.Fatalf("tshark ExID %q: %v", exids[i], err)
			}
			d, err := hex.DecodeString(strings.ReplaceAll(datas[i], ":", ""))
			if err != nil {
				t.Fatalf("tshark data %q: %v", datas[i], err)
			}
			got[n] = append(got[n], tsharkOption{exid: uint16(id), data: d})
		}
	}
	return got
}

// TestINTOptionDecodedByTshark captures a flow through the INT hop on both
// ends of the path and checks, frame by frame, that tshark finds the same
// options as the Go codec: same ExID (FORWARD 0xCC10 on data, ECHO 0xCC11
// on ACKs) and the same slot bytes.
func TestINTOptionDecodedByTshark(t *testing.T) {
	testutil.RequireKernelCC(t)
	if _, err := exec.LookPath("tshark"); err != nil {
		testutil.Skip(t, "tshark is not installed (scripts/test.sh installs it: apt-get install tshark)")
	}
	_, n := newSys(t)
	enableINTForTest(t, n, sockops.Config{})
	d := newDumbbell(t, 1)
	hopForTest(t, d, 0)
	sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	atReceiver := capture(t, ctx, d.Receiver, 300)
	atSender := capture(t, ctx, d.Senders[0], 300)
	sendFlow(t, d.Senders[0], sink.Addr, "cubic", 4<<20)
	waitSink(t, sink, 1, 4<<20)
	cancel()

	for _, side := range []struct {
		name string
		pkts []captured
		want telemetry.Direction
	}{
		{"receiver", <-atReceiver, telemetry.Forward},
		{"sender", <-atSender, telemetry.Echo},
	} {
		t.Run(side.name, func(t *testing.T) {
			var frames [][]byte
			var ours []captured
			for _, c := range side.pkts {
				if c.found {
					frames = append(frames, c.frame)
					ours = append(ours, c)
				}
			}
			if len(ours) == 0 {
				t.Fatalf("captured no INT option at the %s", side.name)
			}
			pcap := filepath.Join(t.TempDir(), side.name+".pcap")
			if err := writePcap(pcap, frames); err != nil {
				t.Fatal(err)
			}
			theirs := tsharkOptions(t, pcap)
			var withDir int
			for i, c := range ours {
				wire, err := c.opt.Marshal()
				if err != nil {
					t.Fatalf("frame %d: re-encode %v: %v", i+1, c.opt, err)
				}
				wantID := binary.BigEndian.Uint16(wire[2:4])
				ts := theirs[i+1]
				if len(ts) != 1 {
					t.Fatalf("frame %d: tshark found %d experimental options, want 1 (ours: %v)", i+1, len(ts), c.opt)
				}
				if ts[0].exid != wantID || !bytes.Equal(ts[0].data, wire[4:]) {
					t.Fatalf("frame %d: tshark says ExID %#04x data %x; the codec says ExID %#04x data %x (%v)",
						i+1, ts[0].exid, ts[0].data, wantID, wire[4:], c.opt)
				}
				if c.opt.Direction == side.want {
					withDir++
				}
			}
			if withDir == 0 {
				t.Fatalf("no %v option among the %d at the %s", side.want, len(ours), side.name)
			}
			t.Logf("%s: tshark and the codec agree on all %d options (%d %v); first: %s",
				side.name, len(ours), withDir, side.want, describe(theirs[1][0]))
		})
	}
}

func describe(o tsharkOption) string {
	return fmt.Sprintf("ExID %#04x data %x", o.exid, o.data)
}
