package amqpwire

import (
	"encoding/binary"
	"fmt"
)

// Descriptor codes of the message sections.
const (
	SectionHeader                uint64 = 0x70
	SectionDeliveryAnnotations   uint64 = 0x71
	SectionMessageAnnotations    uint64 = 0x72
	SectionProperties            uint64 = 0x73
	SectionApplicationProperties uint64 = 0x74
	SectionData                  uint64 = 0x75
	SectionAMQPSequence          uint64 = 0x76
	SectionAMQPValue             uint64 = 0x77
	SectionFooter                uint64 = 0x78
)

// Section locates one section of an encoded message: its descriptor code and
// the byte range [Start, End) of the whole described value (descriptor
// included) within the payload given to SplitSections.
type Section struct {
	Code  uint64
	Start int
	End   int
}

// Bytes returns the section's bytes within payload.
func (s Section) Bytes(payload []byte) []byte {
	return payload[s.Start:s.End]
}

// SplitSections splits an encoded message (the payload of a delivery) into
// its sections without decoding their contents, so a broker can rewrite the
// header or annotations and copy the rest verbatim. Section order is not
// checked; every section must carry a known descriptor.
func SplitSections(payload []byte) ([]Section, error) {
	var out []Section
	for off := 0; off < len(payload); {
		b := payload[off:]
		if b[0] != codeDescribed {
			return nil, fmt.Errorf("split sections: at offset %d: %w", off, malformed("constructor %#02x, want a described section", b[0]))
		}
		desc, n, err := skipValue(b[1:], 1)
		if err != nil {
			return nil, fmt.Errorf("split sections: descriptor at offset %d: %w", off, err)
		}
		code, err := sectionCode(desc)
		if err != nil {
			return nil, fmt.Errorf("split sections: at offset %d: %w", off, err)
		}
		_, m, err := skipValue(b[1+n:], 1)
		if err != nil {
			return nil, fmt.Errorf("split sections: section %#x at offset %d: %w", code, off, err)
		}
		end := off + 1 + n + m
		out = append(out, Section{Code: code, Start: off, End: end})
		off = end
	}
	return out, nil
}

func sectionCode(desc any) (uint64, error) {
	var code uint64
	switch d := desc.(type) {
	case uint64:
		code = d
	case Symbol:
		c, ok := symbolicDescriptors[d]
		if !ok {
			return 0, malformed("unknown section descriptor %q", d)
		}
		code = c
	default:
		return 0, malformed("section descriptor must be ulong or symbol, got %T", desc)
	}
	if code < SectionHeader || code > SectionFooter {
		return 0, malformed("unknown section descriptor %#x", code)
	}
	return code, nil
}

// skipValue measures the value at the start of b without building it. It
// returns the value itself only for the small descriptor types (ulong,
// symbol); compound values are skipped by their size field.
func skipValue(b []byte, depth int) (any, int, error) {
	if depth > MaxDepth {
		return nil, 0, malformed("nesting deeper than %d", MaxDepth)
	}
	if len(b) == 0 {
		return nil, 0, malformed("truncated: missing constructor")
	}
	code := b[0]
	switch code {
	case codeDescribed:
		_, n1, err := skipValue(b[1:], depth+1)
		if err != nil {
			return nil, 0, err
		}
		_, n2, err := skipValue(b[1+n1:], depth+1)
		if err != nil {
			return nil, 0, err
		}
		return nil, 1 + n1 + n2, nil
	case codeList8, codeList32, codeMap8, codeMap32, codeArray8, codeArray32:
		_, _, used, err := compound(code&0xf0 == 0xc0 || code == codeArray8, b[1:])
		if err != nil {
			return nil, 0, err
		}
		return nil, 1 + used, nil
	case codeUlong0, codeSmallUlong, codeUlong, codeSym8, codeSym32:
		var d decoder
		d.budget = 1
		v, n, err := d.body(code, b[1:], depth)
		if err != nil {
			return nil, 0, err
		}
		return v, 1 + n, nil
	}
	if code >= codeNull && code <= codeList0 {
		return nil, 1, nil
	}
	if w := fixedWidth(code); w > 0 {
		if err := needValue(b[1:], w, code); err != nil {
			return nil, 0, err
		}
		return nil, 1 + w, nil
	}
	switch code {
	case codeVbin8, codeStr8:
		if err := need(b[1:], 1, "length"); err != nil {
			return nil, 0, err
		}
		n := 1 + int(b[1])
		if err := needValue(b[1:], n, code); err != nil {
			return nil, 0, err
		}
		return nil, 1 + n, nil
	case codeVbin32, codeStr32:
		if err := need(b[1:], 4, "length"); err != nil {
			return nil, 0, err
		}
		n := 4 + uint64(binary.BigEndian.Uint32(b[1:]))
		if uint64(len(b)-1) < n {
			return nil, 0, malformed("truncated %#02x value: need %d bytes, have %d", code, n, len(b)-1)
		}
		return nil, 1 + int(n), nil
	}
	return nil, 0, malformed("unknown constructor %#02x", code)
}
