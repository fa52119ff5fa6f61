package agent

import (
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// Lines copied from a Linux host's /proc/net/tcp and tcp6 (amd64), with python
// listening on 127.0.0.1:40126, "::":40123, "::1":40124 and
// "::ffff:127.0.0.1":40125, next to other listeners and connections.
const (
	realTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode                                                     
   0: 0100007F:9CBE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 10905114 1 00000000e53a4761 100 0 0 10 0                  
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 651 1 00000000b234470a 100 0 0 10 0                       
   2: 0100007F:A425 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 10905067 2 00000000040cee9e 100 0 0 10 0                  
   3: 0100007F:9907 0100007F:9666 06 00000000:00000000 03:000001B8 00000000     0        0 0 3 000000008a57619b                                      
   6: 0100007F:ECD4 0100007F:A425 01 00000000:00000000 02:00000B80 00000000     0        0 10905070 3 00000000dfe77a1d 20 4 24 14 -1                 
  15: 0100007F:A425 0100007F:ECD4 01 00000000:00000000 02:000005A4 00000000     0        0 10905071 3 00000000efe9c845 20 4 29 14 -1                 
`
	realTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:9CBD 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 10905113 1 000000007339730c 100 0 0 10 0
   1: 00000000000000000000000000000000:9CBB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 10905111 1 00000000edd3a502 100 0 0 10 0
   2: 00000000000000000000000001000000:9CBC 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 10905112 1 00000000dc5aed7f 100 0 0 10 0
`
	// gVisor's netstack (runsc --network=none), with python listening on
	// 127.0.0.1:8123 and "::1":8125.
	gvisorTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode                                                     
   6: 0100007F:1FBB 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0        7 2 0000000000000000 0 0 0 0 -1
`
	gvisorTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
  10: 00000000000000000000000001000000:1FBD 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0       11 2 0000000000000000 0 0 0 0 -1
`
	tcpHeader  = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	tcp6Header = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
)

// littleEndian reports whether this host prints /proc/net/tcp addresses as
// the lines above do.
func littleEndian() bool {
	return binary.NativeEndian.Uint16([]byte{1, 0}) == 1
}

func lp(port int, addr string) sandbox.ListeningPort {
	return sandbox.ListeningPort{Port: port, Address: addr}
}

func TestParseListening(t *testing.T) {
	if !littleEndian() {
		t.Skip("the lines were copied from a little-endian host")
	}
	tests := []struct {
		name      string
		tcp, tcp6 string
		want      []sandbox.ListeningPort
	}{
		{"real tcp", realTCP, "", []sandbox.ListeningPort{lp(2024, "0.0.0.0"), lp(40126, "127.0.0.1"), lp(42021, "127.0.0.1")}},
		{"real tcp6", "", realTCP6, []sandbox.ListeningPort{lp(40123, "::"), lp(40124, "::1"), lp(40125, "::ffff:127.0.0.1")}},
		{"both, sorted by port", realTCP, realTCP6, []sandbox.ListeningPort{
			lp(2024, "0.0.0.0"), lp(40123, "::"), lp(40124, "::1"), lp(40125, "::ffff:127.0.0.1"), lp(40126, "127.0.0.1"), lp(42021, "127.0.0.1")}},
		{"gVisor", gvisorTCP, gvisorTCP6, []sandbox.ListeningPort{lp(8123, "127.0.0.1"), lp(8125, "::1")}},
		{"same port on v4 and v6, sorted by address", tcpHeader +
			"   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n",
			tcp6Header +
				"   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0\n" +
				"   1: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0\n",
			[]sandbox.ListeningPort{lp(8080, "0.0.0.0"), lp(8080, "::"), lp(8080, "::1")}},
		{"SO_REUSEPORT listeners once", tcpHeader +
			"   0: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n" +
			"   1: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0\n", "",
			[]sandbox.ListeningPort{lp(80, "127.0.0.1")}},
		{"lower-case hex", tcpHeader +
			"   0: 0a00a8c0:abcd 00000000:0000 0a 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n", "",
			[]sandbox.ListeningPort{lp(0xabcd, "192.168.0.10")}},
		{"only connections", tcpHeader +
			"   3: 0100007F:9907 0100007F:9666 06 00000000:00000000 03:000001B8 00000000     0        0 0 3 000000008a57619b\n", "",
			[]sandbox.ListeningPort{}},
		{"headers only", tcpHeader, tcp6Header, []sandbox.ListeningPort{}},
		{"nothing", "", "", []sandbox.ListeningPort{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseListening([]byte(tc.tcp), []byte(tc.tcp6))
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseListening(%s) = %v, %v; want %v", tc.name, got, err, tc.want)
			}
		})
	}
}

func TestParseListeningErrors(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"short line", "   0: 0100007F:0050 00000000:0000\n"},
		{"no colon after sl", "   0 0100007F:0050 00000000:0000 0A\n"},
		{"no port", "   0: 0100007F 00000000:0000 0A\n"},
		{"short port", "   0: 0100007F:50 00000000:0000 0A\n"},
		{"port 0", "   0: 0100007F:0000 00000000:0000 0A\n"},
		{"bad port", "   0: 0100007F:00G0 00000000:0000 0A\n"},
		{"address of 6 bytes", "   0: 0100007F0000:0050 00000000:0000 0A\n"},
		{"not hex", "   0: 0100007X:0050 00000000:0000 0A\n"},
		{"signed word", "   0: +100007F:0050 00000000:0000 0A\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := parseListening([]byte(tcpHeader + tc.in)); err == nil {
				t.Errorf("parseListening(%q) = %v, want an error", tc.in, got)
			}
		})
	}
}

func FuzzParseListening(f *testing.F) {
	f.Add([]byte(realTCP), []byte(realTCP6))
	f.Add([]byte(tcpHeader), []byte{})
	f.Add([]byte("   0: 0100007F:0050 00000000:0000 0A\n"), []byte("0: 00000000000000000000000000000000:1F90 0 0A"))
	f.Fuzz(func(t *testing.T, tcp, tcp6 []byte) {
		got, err := parseListening(tcp, tcp6)
		if err != nil {
			return
		}
		// What parses is a sorted set of valid ports and addresses.
		for i, p := range got {
			if err := sandbox.ValidatePort(p.Port); err != nil {
				t.Fatalf("port %+v: %v", p, err)
			}
			if a, err := netip.ParseAddr(p.Address); err != nil || a.String() != p.Address {
				t.Fatalf("address %+v does not round-trip: %v, %v", p, a, err)
			}
			if i > 0 && (got[i-1].Port > p.Port || got[i-1].Port == p.Port && got[i-1].Address >= p.Address) {
				t.Fatalf("not a sorted set: %v", got)
			}
		}
	})
}
