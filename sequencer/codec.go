package sequencer

import "errors"

// MarshalBinary encodes the state in the compact, versioned binary format.
// PLACEHOLDER: replaced by the real codec.
func (s *State) MarshalBinary() ([]byte, error) {
	return nil, errors.New("sequencer: codec not implemented")
}

// UnmarshalBinary decodes a state written by MarshalBinary.
func (s *State) UnmarshalBinary(b []byte) error {
	return errors.New("sequencer: codec not implemented")
}
