package devstack

import (
	"encoding/json"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"
)

// Every attribute value type survives the state file's DynamoDB JSON,
// empty binaries, lists and maps included.
func TestStateValuesRoundTrip(t *testing.T) {
	t.Parallel()
	item := map[string]ddb.AttributeValue{
		"s":      &ddb.AttributeValueMemberS{Value: "J#dev#3"},
		"empty":  &ddb.AttributeValueMemberS{Value: ""},
		"n":      &ddb.AttributeValueMemberN{Value: "12345678901234567890"},
		"b":      &ddb.AttributeValueMemberB{Value: []byte{0, 1, 2, 255}},
		"b0":     &ddb.AttributeValueMemberB{Value: []byte{}},
		"t":      &ddb.AttributeValueMemberBOOL{Value: true},
		"f":      &ddb.AttributeValueMemberBOOL{Value: false},
		"null":   &ddb.AttributeValueMemberNULL{Value: true},
		"ss":     &ddb.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns":     &ddb.AttributeValueMemberNS{Value: []string{"1", "2.5"}},
		"bs":     &ddb.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}},
		"l0":     &ddb.AttributeValueMemberL{Value: []ddb.AttributeValue{}},
		"m0":     &ddb.AttributeValueMemberM{Value: map[string]ddb.AttributeValue{}},
		"nested": &ddb.AttributeValueMemberL{Value: []ddb.AttributeValue{&ddb.AttributeValueMemberM{Value: map[string]ddb.AttributeValue{"x": &ddb.AttributeValueMemberN{Value: "1"}}}}},
	}
	m, err := toStateItem(item)
	require.NoError(t, err)
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"b":{"B":"AAEC/w=="}`, "binary as base64, as DynamoDB JSON has it")
	var back map[string]stateValue
	require.NoError(t, json.Unmarshal(raw, &back))
	got, err := stateItem(back)
	require.NoError(t, err)
	require.Equal(t, item, got)
}
