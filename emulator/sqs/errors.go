package sqs

import "fmt"

// apiError is an error the service answers with: its JSON __type, the code of the
// query protocol (the SDKs read it from X-Amzn-Query-Error), the HTTP status and
// whether the sender is at fault.
type apiError struct {
	typ       string
	queryCode string
	status    int
	sender    bool
	msg       string
}

func (e *apiError) Error() string { return e.queryCode + ": " + e.msg }

// code is the error code a batch result entry carries.
func (e *apiError) code() string { return e.queryCode }

func newErr(typ, queryCode string, format string, args ...any) *apiError {
	return &apiError{typ: typ, queryCode: queryCode, status: 400, sender: true, msg: fmt.Sprintf(format, args...)}
}

func errMissing(param string) *apiError {
	return newErr("MissingParameter", "MissingParameter", "The request must contain the parameter %s.", param)
}

func errInvalidParam(param, value, reason string) *apiError {
	return newErr("InvalidParameterValue", "InvalidParameterValue", "Value %s for parameter %s is invalid. Reason: %s", value, param, reason)
}

func errInvalidParams(format string, args ...any) *apiError {
	return newErr("InvalidParameterValue", "InvalidParameterValue", format, args...)
}

func errAttrValue(name string) *apiError {
	return newErr("InvalidAttributeValue", "InvalidAttributeValue", "Invalid value for the parameter %s.", name)
}

func errAttrName(name string) *apiError {
	return newErr("InvalidAttributeName", "InvalidAttributeName", "Unknown Attribute %s.", name)
}

func errNoQueue() *apiError {
	return newErr("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
}

func errReceiptHandle(h string) *apiError {
	return newErr("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "The input receipt handle %q is not a valid receipt handle.", h)
}

func errReceiptExpired(h string) *apiError {
	return errInvalidParam("ReceiptHandle", h, "The receipt handle has expired.")
}

func errNotInflight() *apiError {
	return newErr("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "Message does not exist or is not available for visibility timeout change.")
}

func errUnsupported(format string, args ...any) *apiError {
	return newErr("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", format, args...)
}
