package sas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/internal/sas"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := sas.Verifier{
		Keys: map[string]string{"RootManageSharedAccessKey": "SAS_KEY_VALUE"},
		Now:  func() time.Time { return now },
	}
	const aud = "amqp://127.0.0.1:41701/Q1/$management"
	good := sas.Sign("RootManageSharedAccessKey", "SAS_KEY_VALUE", aud, now.Add(time.Hour))

	tests := []struct {
		name     string
		token    string
		audience string
		wantErr  error
	}{
		{name: "valid", token: good, audience: aud},
		{name: "valid, audience case differs", token: good, audience: strings.ToLower(aud)},
		{name: "namespace token covers entity", token: sas.Sign("RootManageSharedAccessKey", "SAS_KEY_VALUE", "amqp://127.0.0.1:41701/", now.Add(time.Hour)), audience: aud},
		{name: "wrong key", token: sas.Sign("RootManageSharedAccessKey", "nope", aud, now.Add(time.Hour)), audience: aud, wantErr: sas.ErrBadSignature},
		{name: "unknown key name", token: sas.Sign("other", "SAS_KEY_VALUE", aud, now.Add(time.Hour)), audience: aud, wantErr: sas.ErrUnknownKey},
		{name: "expired", token: sas.Sign("RootManageSharedAccessKey", "SAS_KEY_VALUE", aud, now.Add(-time.Second)), audience: aud, wantErr: sas.ErrExpired},
		{name: "other entity", token: good, audience: "amqp://127.0.0.1:41701/q2", wantErr: sas.ErrAudience},
		{name: "prefix of name is not a parent", token: sas.Sign("RootManageSharedAccessKey", "SAS_KEY_VALUE", "amqp://h/q", now.Add(time.Hour)), audience: "amqp://h/q1", wantErr: sas.ErrAudience},
		{name: "garbage", token: "Bearer xyz", audience: aud, wantErr: sas.ErrMalformed},
		{name: "missing sig", token: "SharedAccessSignature sr=a&se=1&skn=k", wantErr: sas.ErrMalformed},
		{name: "tampered expiry", token: strings.Replace(good, "&se=", "&se=9", 1), audience: aud, wantErr: sas.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := v.Verify(tt.token, tt.audience)
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
		})
	}
}

func TestParseKnownToken(t *testing.T) {
	t.Parallel()
	// Token shape produced by the azservicebus SDK for audience amqp://localhost/q1.
	tok := sas.Sign("k", "secret", "amqp://localhost/q1", time.Unix(1700000000, 0))
	require.True(t, strings.HasPrefix(tok, "SharedAccessSignature sr=amqp%3a%2f%2flocalhost%2fq1&sig="))
	p, err := sas.Parse(tok)
	require.NoError(t, err)
	require.Equal(t, "amqp://localhost/q1", p.Resource)
	require.Equal(t, "k", p.KeyName)
	require.Equal(t, int64(1700000000), p.Expiry.Unix())
}
