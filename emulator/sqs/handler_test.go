package sqs_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/sqs"
)

func newClient(t testing.TB, endpoint string) *awssqs.Client {
	t.Helper()
	return awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), RetryMaxAttempts: 1})
}

// TestRefusesWhatIsNotModeled: what this local SQS does not model answers with a
// clear error instead of a partial imitation.
func TestRefusesWhatIsNotModeled(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	ctx := t.Context()

	_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("standard")})
	var unsupported *types.UnsupportedOperation
	require.ErrorAs(t, err, &unsupported, "a standard queue")
	require.Contains(t, unsupported.ErrorMessage(), "FIFO")

	created, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("q.fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: created.QueueUrl, Tags: map[string]string{"a": "b"}})
	require.ErrorAs(t, err, &unsupported, "TagQueue")
	_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:000000000000:q.fifo")})
	require.ErrorAs(t, err, &unsupported, "StartMessageMoveTask")
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("tagged.fifo"), Attributes: map[string]string{"FifoQueue": "true"}, Tags: map[string]string{"a": "b"}})
	require.ErrorAs(t, err, &unsupported, "CreateQueue with tags")
	_, err = c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("tagged.fifo")})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing, "a refused CreateQueue creates nothing")

	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		status int
		body   string
	}{
		{"query protocol", func() *http.Request {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/", strings.NewReader(url.Values{"Action": {"ListQueues"}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		}, http.StatusBadRequest, "JSON protocol only"},
		{"another service's target", func() *http.Request {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/", strings.NewReader("{}"))
			r.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
			return r
		}, http.StatusBadRequest, "JSON protocol only"},
		{"malformed JSON", func() *http.Request {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/", strings.NewReader("{"))
			r.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
			return r
		}, http.StatusBadRequest, "SerializationException"},
		{"health", func() *http.Request {
			return httptest.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/health", nil)
		}, http.StatusOK, "ok"},
	} {
		req := tc.req()
		req.RequestURI = ""
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, tc.name)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, errors.Join(err, resp.Body.Close()))
		require.Equal(t, tc.status, resp.StatusCode, tc.name)
		require.Contains(t, string(body), tc.body, tc.name)
	}
}

// TestServiceCloseEndsLongPolls: Close returns while a receive waits, and the receive
// ends with an error instead of waiting out its 20 seconds.
func TestServiceCloseEndsLongPolls(t *testing.T) {
	t.Parallel()
	svc, err := sqs.Start(t.Context(), "127.0.0.1:0", sqs.Config{})
	require.NoError(t, err)
	c := newClient(t, svc.URL())
	q, err := c.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String("wait.fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	require.Equal(t, svc.URL()+"/000000000000/wait.fifo", aws.ToString(q.QueueUrl))

	wrote := &wroteClient{wrote: make(chan struct{})}
	waiting := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(svc.URL()), HTTPClient: wrote,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), RetryMaxAttempts: 1})
	done := make(chan error, 1)
	go func() {
		_, err := waiting.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 20})
		done <- err
	}()
	<-wrote.wrote // the receive is with the server
	require.NoError(t, svc.Close())
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a long poll outlived Close")
	}
}

// wroteClient is an HTTP client that closes wrote once a request has been sent.
type wroteClient struct {
	wrote chan struct{}
	once  sync.Once
}

func (c *wroteClient) Do(r *http.Request) (*http.Response, error) {
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { c.once.Do(func() { close(c.wrote) }) }}
	return http.DefaultClient.Do(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}
