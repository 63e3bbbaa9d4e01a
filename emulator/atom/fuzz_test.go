package atom_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/atom"
	"github.com/seqbus/seqbus/emulator/broker"
)

// FuzzPut sends arbitrary bodies to every kind of PUT address: the handler must answer
// with a client error or success, never panic or fail with a server error.
func FuzzPut(f *testing.F) {
	seeds := []string{
		`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription><LockDuration>PT1M</LockDuration></QueueDescription></content></entry>`,
		`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><TopicDescription/></content></entry>`,
		`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><SubscriptionDescription><DefaultRuleDescription><Filter xmlns:i="http://www.w3.org/2001/XMLSchema-instance" i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters><KeyValueOfstringanyType><Key>p</Key><Value i:type="d:int">1</Value></KeyValueOfstringanyType></Parameters></Filter></DefaultRuleDescription></SubscriptionDescription></content></entry>`,
		`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><Filter i:type="CorrelationFilter"><Label>x</Label></Filter><Action i:type="SqlRuleAction"><SqlExpression>SET a = '@b'</SqlExpression></Action><Name>r</Name></RuleDescription></content></entry>`,
		`<entry><content><RuleDescription><Filter i:type="SqlFilter"><SqlExpression>[@x] = "@y" AND @</SqlExpression></Filter></RuleDescription></content></entry>`,
		"",
		"<",
	}
	paths := []string{"/q", "/t/Subscriptions/s", "/t/Subscriptions/s/Rules/r", "/t/Subscriptions/s/Rules/"}
	for i, s := range seeds {
		f.Add(uint8(i), s, i%2 == 0)
	}
	auth := sign(keyName, key, "https://localhost/", time.Now().Add(24*time.Hour))
	f.Fuzz(func(t *testing.T, which uint8, body string, update bool) {
		b := broker.New(broker.Config{})
		defer b.Close()
		require.NoError(t, b.CreateTopic("t", broker.EntityProperties{}))
		require.NoError(t, b.CreateSubscription("t", "s", broker.EntityProperties{}))
		h := atom.NewHandler(b, atom.Config{KeyName: keyName, Key: key})
		req := httptest.NewRequest(http.MethodPut, "http://localhost"+paths[int(which)%len(paths)], strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		if update {
			req.Header.Set("If-Match", "*")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Less(t, rec.Code, http.StatusInternalServerError, rec.Body.String())
	})
}
