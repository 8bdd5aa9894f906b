package telemetry

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestWorkedExampleInDoc checks that the hex dump in the worked example of
// docs/int-option.md is what Marshal produces for that option.
func TestWorkedExampleInDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/int-option.md")
	if err != nil {
		t.Fatalf("read the format documentation: %v", err)
	}
	b, err := (Option{Direction: Forward, Slots: 3, Hops: testHops()[:2]}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dump := hex.Dump(b)
	if !strings.Contains(string(doc), "```\n"+dump+"```\n") {
		t.Fatalf("docs/int-option.md does not hold the worked example's dump:\n%s", dump)
	}
	for _, line := range []string{
		"| 4–11 | `90 f4 24 01 86 a0 00 64` | slot 1 | word `0x9_0f4240_186a0_0064` |",
		"| 12–19 | `6f ff ff 00 00 01 ff ff` | slot 2 | word `0x6_fffff0_00001_ffff` |",
	} {
		if !strings.Contains(string(doc), line) {
			t.Errorf("docs/int-option.md lacks the line %q", line)
		}
	}
}
