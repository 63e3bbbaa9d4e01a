package sqsadapter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// RedrivePolicy is a queue's RedrivePolicy attribute: where SQS moves a message it has handed
// out MaxReceiveCount times.
type RedrivePolicy struct {
	// DeadLetterTargetARN is the dead-letter queue's ARN, arn:aws:sqs:<region>:<account>:<name>.
	DeadLetterTargetARN string
	// Account and Name are the dead-letter queue's, from its ARN (Account may be empty).
	Account, Name string
	// MaxReceiveCount is how many receives a message gets before SQS moves it.
	MaxReceiveCount int
}

// ParseRedrivePolicy parses a RedrivePolicy attribute (JSON, its maxReceiveCount a number or a
// string of one, as SQS takes either). A policy without an SQS queue ARN is an error that wraps
// ErrConfig.
func ParseRedrivePolicy(policy string) (RedrivePolicy, error) {
	var raw struct {
		Target string          `json:"deadLetterTargetArn"`
		Max    json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(policy), &raw); err != nil {
		return RedrivePolicy{}, fmt.Errorf("%w: RedrivePolicy %q is not JSON: %v", ErrConfig, policy, err)
	}
	if raw.Target == "" {
		return RedrivePolicy{}, fmt.Errorf("%w: RedrivePolicy %q has no deadLetterTargetArn", ErrConfig, policy)
	}
	parts := strings.Split(raw.Target, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
		return RedrivePolicy{}, fmt.Errorf("%w: deadLetterTargetArn %q is not an SQS queue ARN", ErrConfig, raw.Target)
	}
	p := RedrivePolicy{DeadLetterTargetARN: raw.Target, Account: parts[4], Name: parts[5]}
	if len(raw.Max) > 0 {
		n, err := strconv.Atoi(string(bytes.Trim(raw.Max, `"`)))
		if err != nil || n < 1 {
			return RedrivePolicy{}, fmt.Errorf("%w: RedrivePolicy %q: maxReceiveCount %s is not a positive number", ErrConfig, policy, raw.Max)
		}
		p.MaxReceiveCount = n
	}
	return p, nil
}
