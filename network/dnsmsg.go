package network

import (
	"errors"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// localTTL is the TTL of the forwarder's own answers (the gateway's
// names).
const localTTL = 60

// parseQuery reads a standard query with exactly one question.
func parseQuery(q []byte) (dnsmessage.Header, dnsmessage.Question, error) {
	var p dnsmessage.Parser
	hdr, err := p.Start(q)
	if err != nil {
		return dnsmessage.Header{}, dnsmessage.Question{}, err
	}
	if hdr.Response || hdr.OpCode != 0 {
		return dnsmessage.Header{}, dnsmessage.Question{}, errors.New("not a standard query")
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return dnsmessage.Header{}, dnsmessage.Question{}, err
	}
	if len(qs) != 1 {
		return dnsmessage.Header{}, dnsmessage.Question{}, errors.New("not one question")
	}
	return hdr, qs[0], nil
}

// reply is the header of the forwarder's own reply to a query with
// header hdr.
func reply(hdr dnsmessage.Header, rcode dnsmessage.RCode) dnsmessage.Header {
	return dnsmessage.Header{ID: hdr.ID, Response: true, RecursionDesired: hdr.RecursionDesired, RecursionAvailable: true, RCode: rcode}
}

// refused is the REFUSED reply to the query (hdr, q).
func refused(hdr dnsmessage.Header, q dnsmessage.Question) []byte {
	m := dnsmessage.Message{Header: reply(hdr, dnsmessage.RCodeRefused), Questions: []dnsmessage.Question{q}}
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	return b
}

// refusedHeader is a REFUSED reply, with no question, to a query the
// forwarder could not read (at least a header: the caller checked).
func refusedHeader(q []byte) []byte {
	b := make([]byte, dnsHeaderLen)
	copy(b, q[:2])                              // ID
	b[2] = 0x80 | q[2]&0x01                     // QR, RD kept
	b[3] = 0x80 | byte(dnsmessage.RCodeRefused) // RA, RCODE
	return b
}

// localAnswer answers the query (hdr, q) with addr: an A record for an A
// (or ANY) question, no record (but no error) for any other type.
func localAnswer(hdr dnsmessage.Header, q dnsmessage.Question, addr netip.Addr) []byte {
	h := reply(hdr, dnsmessage.RCodeSuccess)
	h.Authoritative = true
	m := dnsmessage.Message{Header: h, Questions: []dnsmessage.Question{q}}
	if (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL) && q.Class == dnsmessage.ClassINET {
		m.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: localTTL},
			Body:   &dnsmessage.AResource{A: addr.As4()},
		}}
	}
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	return b
}

// answerAddrs returns the IPv4 addresses of the A records in the answer
// section of a successful reply (whatever name they belong to: a CNAME's
// target's are the asked name's too); none for a reply it cannot read.
func answerAddrs(msg []byte) []netip.Addr {
	var p dnsmessage.Parser
	hdr, err := p.Start(msg)
	if err != nil || hdr.RCode != dnsmessage.RCodeSuccess {
		return nil
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil
	}
	var out []netip.Addr
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return out
		}
		if h.Type != dnsmessage.TypeA || h.Class != dnsmessage.ClassINET {
			if p.SkipAnswer() != nil {
				return out
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return out
		}
		out = append(out, netip.AddrFrom4(a.A))
	}
}
