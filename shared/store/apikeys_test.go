package store_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/store"
)

// Keys are kept hashed, listed from their catalog partition and revoked by
// name or id; a revoked key names no tenant.
func TestAPIKeysAreListedAndRevoked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	k, err := b.st.AddAPIKey(ctx, "acme", "ci", "secret-1")
	require.NoError(t, err)
	require.Equal(t, store.KeyID("secret-1"), k.ID)
	_, err = b.st.AddAPIKey(ctx, "acme", "ci", "secret-2")
	require.ErrorIs(t, err, store.ErrKeyNameTaken)
	_, err = b.st.TenantForKey(ctx, "secret-2")
	require.ErrorIs(t, err, domain.ErrUnauthorized, "a refused add writes neither item")
	_, err = b.st.AddAPIKey(ctx, "acme", "ops", "secret-3")
	require.NoError(t, err)
	require.NoError(t, b.st.PutAPIKey(ctx, "other", "secret-4"))
	require.NoError(t, b.st.PutAPIKey(ctx, "other", "secret-4"), "putting a key again changes nothing")

	tenant, err := b.st.TenantForKey(ctx, "secret-1")
	require.NoError(t, err)
	require.Equal(t, "acme", tenant)

	acme, err := b.st.ListAPIKeys(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, acme, 2)
	require.Equal(t, []string{"ci", "ops"}, []string{acme[0].Name, acme[1].Name})
	all, err := b.st.ListAPIKeys(ctx, "")
	require.NoError(t, err)
	names := map[string]string{}
	for _, k := range all {
		names[k.Tenant+"/"+k.Name] = k.ID
	}
	// The stack's own test keys are there too, named by their ids.
	require.Equal(t, store.KeyID("secret-4"), names["other/"+store.KeyID("secret-4")])
	for _, raw := range []string{"secret-1", "secret-3", "secret-4"} {
		for _, it := range all {
			require.NotContains(t, it.Hash+it.Name+it.ID, raw, "no key is stored as it is")
		}
	}

	_, err = b.st.RevokeAPIKey(ctx, "acme", "ci")
	require.NoError(t, err)
	_, err = b.st.TenantForKey(ctx, "secret-1")
	require.ErrorIs(t, err, domain.ErrUnauthorized)
	_, err = b.st.RevokeAPIKey(ctx, "", store.KeyID("secret-3"))
	require.NoError(t, err, "an id finds its key among every tenant's")
	_, err = b.st.RevokeAPIKey(ctx, "acme", "ci")
	require.ErrorIs(t, err, domain.ErrNotFound)
	acme, err = b.st.ListAPIKeys(ctx, "acme")
	require.NoError(t, err)
	require.Empty(t, acme)
}

// A catalog entry whose key item was deleted behind its back (by hand, or
// by a tool that knew only the key item) authenticates nothing: the
// listing drops it and removes the entry, and leaves the others be.
func TestAPIKeyListDropsAnEntryWhoseKeyIsGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.st.AddAPIKey(ctx, "orphans", "gone", "secret-gone")
	require.NoError(t, err)
	_, err = b.st.AddAPIKey(ctx, "orphans", "kept", "secret-kept")
	require.NoError(t, err)
	_, err = b.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &b.table, Key: map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: "K#" + engine.HashKey("secret-gone")}, "sk": &ddb.AttributeValueMemberS{Value: "K"},
	}})
	require.NoError(t, err)

	for _, tenant := range []string{"orphans", ""} {
		keys, err := b.st.ListAPIKeys(ctx, tenant)
		require.NoError(t, err)
		var names []string
		for _, k := range keys {
			if k.Tenant == "orphans" {
				names = append(names, k.Name)
			}
		}
		require.Equal(t, []string{"kept"}, names, "tenant %q", tenant)
	}
	entry, err := b.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, Key: map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: "KEYS"}, "sk": &ddb.AttributeValueMemberS{Value: "orphans#gone"},
	}})
	require.NoError(t, err)
	require.Empty(t, entry.Item, "the orphan's catalog entry is removed")
	_, err = b.st.AddAPIKey(ctx, "orphans", "gone", "secret-new")
	require.NoError(t, err, "its name is free again")
	tenant, err := b.st.TenantForKey(ctx, "secret-kept")
	require.NoError(t, err)
	require.Equal(t, "orphans", tenant)
}
