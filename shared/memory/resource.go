package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Resources = (*Store)(nil)

func (s *Store) getResource(tenant, id string) (*domain.Resource, error) {
	b, ok := s.resources[jobKey{tenant, id}]
	if !ok {
		return nil, fmt.Errorf("resource %s: %w", id, domain.ErrNotFound)
	}
	var r domain.Resource
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode resource %s: %w", id, err)
	}
	return &r, nil
}

// GetResource answers one of tenant's resources, or domain.ErrNotFound.
func (s *Store) GetResource(_ context.Context, tenant, id string) (*domain.Resource, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getResource(tenant, id)
}

// ListResources answers tenant's resources by id.
func (s *Store) ListResources(_ context.Context, tenant string) ([]*domain.Resource, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*domain.Resource
	for k := range s.resources {
		if k.tenant != tenant {
			continue
		}
		r, err := s.getResource(k.tenant, k.id)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *domain.Resource) int { return strings.Compare(a.ID, b.ID) })
	return out[:min(len(out), domain.MaxResourcesPerTenant)], nil
}

// SaveResource writes r if the stored one is at r.Version (none stored
// for version 0), and bumps r.Version.
func (s *Store) SaveResource(_ context.Context, r *domain.Resource) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := jobKey{r.Tenant, r.ID}
	var stored int64
	if b, ok := s.resources[k]; ok {
		var cur domain.Resource
		if err := json.Unmarshal(b, &cur); err != nil {
			return err
		}
		stored = cur.Version
	}
	if stored != r.Version {
		return fmt.Errorf("save resource %s at version %d: %w", r.ID, r.Version, domain.ErrVersionConflict)
	}
	r.Version++
	b, err := json.Marshal(r)
	if err != nil {
		r.Version--
		return err
	}
	if s.resources == nil {
		s.resources = map[jobKey][]byte{}
	}
	s.resources[k] = b
	s.changes.add()
	return nil
}

// DeleteResource removes a resource still at version.
func (s *Store) DeleteResource(_ context.Context, tenant, id string, version int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.getResource(tenant, id)
	if err != nil {
		return err
	}
	if r.Version != version {
		return fmt.Errorf("delete resource %s: %w", id, domain.ErrVersionConflict)
	}
	delete(s.resources, jobKey{tenant, id})
	s.changes.add()
	return nil
}

// ExtendHolder moves a held slot's expiry, if it is still held.
func (s *Store) ExtendHolder(_ context.Context, tenant, id, key string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.getResource(tenant, id)
	if err != nil {
		return err
	}
	h, ok := r.Holders[key]
	if !ok {
		return fmt.Errorf("%w: its slot of resource %s is no longer held (it ran out, and another attempt may hold it now); stop this attempt's work", domain.ErrLeaseLost, id)
	}
	h.ExpiresAt = cmp.Or(until, h.ExpiresAt)
	r.Holders[key] = h
	r.Version++
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	s.resources[jobKey{tenant, id}] = b
	s.changes.add()
	return nil
}
