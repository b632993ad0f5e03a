package store

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"
)

// A dictionary is part of every document compressed with it: changed, it
// would make them unreadable. A better one is added under a new number.
func TestDictionariesAreFrozen(t *testing.T) {
	t.Parallel()
	frozen := map[int]string{1: "d2e1e26849d46fdd71bc99b2cb5d0f8ff39c6792b5866c0aab070eb64f8fe479"}
	require.Len(t, dictionaries, len(frozen))
	for n, d := range dictionaries {
		sum := sha256.Sum256(d)
		require.Equal(t, frozen[n], hex.EncodeToString(sum[:]), "dictionary %d changed", n)
		require.LessOrEqual(t, len(d), 32<<10, "flate uses a dictionary's last 32 KB only")
	}
}

// A job's item is written with the dictionary, much smaller than plain,
// and reads back; an item naming a dictionary this build does not know
// fails to read, naming it, rather than being misread.
func TestDocumentsAreCompressedWithTheDictionary(t *testing.T) {
	t.Parallel()
	j, err := goldenSingleStep()
	require.NoError(t, err)
	it, err := item(j)
	require.NoError(t, err)
	require.Equal(t, &ddb.AttributeValueMemberN{Value: "1"}, it[dictAttr])
	doc, err := encodeDocument(j)
	require.NoError(t, err)
	plain, err := deflate(doc)
	require.NoError(t, err)
	z := it["doc"].(*ddb.AttributeValueMemberB).Value
	require.Less(t, len(z)*2, len(plain), "at most half the plain size: %d against %d", len(z), len(plain))
	got, err := (&Store{}).decodeJob(it)
	require.NoError(t, err)
	require.Equal(t, j.Events, got.Events)

	it[dictAttr] = &ddb.AttributeValueMemberN{Value: "99"}
	_, err = (&Store{}).decodeJob(it)
	require.ErrorContains(t, err, "dictionary 99")
}
