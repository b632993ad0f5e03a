package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/spf13/cobra"

	"github.com/stepflow/stepflow/localstack/devstate"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
)

// adminFlags say where the stack's AWS resources are.
type adminFlags struct {
	stack, table, region, localState string
}

func (o *adminFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.stack, "stack", "", "the CloudFormation stack on AWS (its resources are looked up)")
	f.StringVar(&o.table, "table", "", "the stack's DynamoDB table (default STEPFLOW_TABLE)")
	f.StringVar(&o.region, "region", "", "the AWS region (default: the standard AWS configuration)")
	f.StringVar(&o.localState, "local-state", "", "the state file of a make dev stack (default STEPFLOW_LOCAL_STATE, else the one of the stack serving --url)")
}

// target is a stack's AWS resources and a configuration to reach them.
type target struct {
	cfg          aws.Config
	table        string
	ready        [domain.MaxPriority + 1]string // queue URLs by priority
	dlqURL       string
	dlqARN       string
	workerPrefix string
	where        string // how it was found, for messages
}

// target finds the stack: --stack on AWS, else --table (or STEPFLOW_TABLE
// and the functions' other variables), else the make dev stack serving
// --url, from the state file it leaves.
func (a *app) target(ctx context.Context, o adminFlags) (*target, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if o.region != "" {
		opts = append(opts, awsconfig.WithRegion(o.region))
	}
	switch {
	case o.stack != "":
		cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		return stackTarget(ctx, cfg, o.stack)
	case cmp.Or(o.table, os.Getenv("STEPFLOW_TABLE")) != "":
		cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		t := envTarget(cfg, os.Getenv)
		t.table, t.where = cmp.Or(o.table, t.table), "--table"
		return t, nil
	}
	path := cmp.Or(o.localState, os.Getenv("STEPFLOW_LOCAL_STATE"))
	if path == "" {
		var err error
		if path, err = devstate.PathForURL(a.url); err != nil {
			return nil, err
		}
	}
	st, err := devstate.Read(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no stack named: pass --stack or --table for a stack on AWS; for the local stack start make dev (no state file %s for %s)", path, a.url)
	}
	if err != nil {
		return nil, err
	}
	if st.Mode == devstate.ModeEmbedded {
		return nil, fmt.Errorf("make dev at %s runs embedded, with no AWS emulator, so there is no table or queue to act on: name API keys when starting it (STEPFLOW_API_KEYS=tenant:key make dev), or get the emulator with make setup and start make dev again", st.URL)
	}
	opts = append(opts, awsconfig.WithRegion(cmp.Or(o.region, st.Region, "us-east-1")),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		awsconfig.WithBaseEndpoint(st.Endpoint))
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration for %s: %w", st.Endpoint, err)
	}
	t := envTarget(cfg, func(k string) string { return st.Env[k] })
	t.where = "make dev stack " + st.Stack + " (" + path + ")"
	return t, nil
}

// envTarget reads the functions' environment variables.
func envTarget(cfg aws.Config, getenv func(string) string) *target {
	t := &target{cfg: cfg, table: getenv("STEPFLOW_TABLE"), dlqURL: getenv("STEPFLOW_DLQ_URL"), dlqARN: getenv("STEPFLOW_DLQ_ARN"), workerPrefix: getenv("STEPFLOW_WORKER_QUEUE_PREFIX")}
	for p := range t.ready {
		t.ready[p] = getenv(fmt.Sprintf("STEPFLOW_QUEUE_P%d", p))
	}
	return t
}

// stackTarget looks a CloudFormation stack's resources up (one request).
func stackTarget(ctx context.Context, cfg aws.Config, stack string) (*target, error) {
	out, err := cloudformation.NewFromConfig(cfg).DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: &stack})
	if err != nil {
		return nil, fmt.Errorf("resources of stack %s: %w", stack, err)
	}
	t := &target{cfg: cfg, workerPrefix: stack + "-w-", where: "stack " + stack}
	for _, r := range out.StackResources {
		id := aws.ToString(r.PhysicalResourceId)
		switch aws.ToString(r.LogicalResourceId) {
		case "JobsTable":
			t.table = id
		case "DeadLetterQueue":
			t.dlqURL = id // an SQS queue's physical id is its URL
		case "ReadyQueueP0", "ReadyQueueP1", "ReadyQueueP2":
			p, _ := strconv.Atoi(strings.TrimPrefix(aws.ToString(r.LogicalResourceId), "ReadyQueueP"))
			t.ready[p] = id
		}
	}
	if t.table == "" {
		return nil, fmt.Errorf("stack %s has no JobsTable: is it a stepflow stack?", stack)
	}
	return t, nil
}

func (t *target) needTable() error {
	if t.table == "" {
		return fmt.Errorf("no table found for %s", t.where)
	}
	return nil
}

// dlq answers the dead-letter queue's URL, looked up by its ARN's name
// when only the ARN is known.
func (t *target) dlq(ctx context.Context, c *sqs.Client) (string, error) {
	if t.dlqURL != "" {
		return t.dlqURL, nil
	}
	if t.dlqARN == "" {
		return "", fmt.Errorf("no dead-letter queue found for %s (STEPFLOW_DLQ_URL or STEPFLOW_DLQ_ARN)", t.where)
	}
	parts := strings.Split(t.dlqARN, ":")
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[len(parts)-1])}
	if len(parts) == 6 {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := c.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("dead-letter queue %s: %w", t.dlqARN, err)
	}
	t.dlqURL = aws.ToString(out.QueueUrl)
	return t.dlqURL, nil
}

func keysCmd(a *app) *cobra.Command {
	var o adminFlags
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys (kept hashed in the stack's table)",
		Long: `API keys live in the stack's DynamoDB table as their SHA-256, never as they are: a
created key is printed once. Against make dev the table is found from its state
file; on AWS pass --stack (or --table) with the standard AWS configuration.`,
	}
	o.register(cmd)
	open := func(ctx context.Context) (*store.Store, error) {
		t, err := a.target(ctx, o)
		if err != nil {
			return nil, err
		}
		if err := t.needTable(); err != nil {
			return nil, err
		}
		return store.New(dynamodb.NewFromConfig(t.cfg), t.table), nil
	}
	var tenant, key string
	create := &cobra.Command{
		Use: "create NAME --tenant TENANT", Short: "Create a key for a tenant under a name; it is printed once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant == "" {
				return errors.New("--tenant is required")
			}
			st, err := open(cmd.Context())
			if err != nil {
				return err
			}
			if key == "" {
				b := make([]byte, 24)
				_, _ = rand.Read(b) // never fails
				key = "sf_" + base64.RawURLEncoding.EncodeToString(b)
			}
			k, err := st.AddAPIKey(cmd.Context(), tenant, args[0], key)
			if err != nil {
				return err
			}
			return a.show(map[string]any{"tenant": k.Tenant, "name": k.Name, "id": k.ID, "key": key}, func() error {
				_, err := fmt.Fprintf(a.stdout, "tenant %s, key %s (%s):\n%s\n(shown once: it is stored hashed)\n", k.Tenant, k.Name, k.ID, key)
				return err
			})
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "the tenant the key names")
	create.Flags().StringVar(&key, "key", "", "the key (default: a new random one)")
	var listTenant string
	list := &cobra.Command{
		Use: "list", Short: "List keys: tenant, name, id, created", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := open(cmd.Context())
			if err != nil {
				return err
			}
			keys, err := st.ListAPIKeys(cmd.Context(), listTenant)
			if err != nil {
				return err
			}
			if keys == nil {
				keys = []store.APIKey{}
			}
			return a.show(keys, func() error {
				rows := make([][]string, 0, len(keys))
				for _, k := range keys {
					rows = append(rows, []string{k.Tenant, k.Name, k.ID, when(&k.CreatedAt)})
				}
				return a.table([]string{"TENANT", "NAME", "ID", "CREATED"}, rows)
			})
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "only this tenant's keys")
	var revokeTenant string
	revoke := &cobra.Command{
		Use: "revoke NAME|ID", Short: "Revoke a key: requests with it are refused (within a minute: the API caches keys it checked)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := open(cmd.Context())
			if err != nil {
				return err
			}
			k, err := st.RevokeAPIKey(cmd.Context(), revokeTenant, args[0])
			if err != nil {
				return err
			}
			return a.show(k, func() error {
				_, err := fmt.Fprintf(a.stdout, "revoked %s (%s) of tenant %s\n", k.Name, k.ID, k.Tenant)
				return err
			})
		},
	}
	revoke.Flags().StringVar(&revokeTenant, "tenant", "", "the key's tenant (needed when several tenants have a key of that name)")
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// dlqMessage is a dead-lettered message as dlq lists it.
type dlqMessage struct {
	ID       string    `json:"message_id"`
	Tenant   string    `json:"tenant"`
	Job      string    `json:"job"`
	Step     string    `json:"step"`
	Receives int       `json:"receives"`
	SentAt   time.Time `json:"sent_at"`
	Source   string    `json:"source,omitempty"` // the queue SQS moved it from, where SQS says (on AWS)
	Body     string    `json:"body"`
	receipt  string
	group    string
}

func dlqCmd(a *app) *cobra.Command {
	var o adminFlags
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List the dead-letter queue and send its messages back to their queues",
		Long: `Messages land in the dead-letter queue when SQS received them maxReceiveCount times
without their step settling (the ready queues: 5). The table is the truth: redrive
sends each message back to the queue its step's messages go to now (read from its
job), which the engine then settles as any delivery.`,
	}
	o.register(cmd)
	var max int
	list := &cobra.Command{
		Use: "list", Short: "Peek at the dead-letter queue's messages (they stay there)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			t, err := a.target(ctx, o)
			if err != nil {
				return err
			}
			c := sqs.NewFromConfig(t.cfg)
			url, err := t.dlq(ctx, c)
			if err != nil {
				return err
			}
			msgs, err := peek(ctx, c, url, max)
			if err != nil {
				return err
			}
			if msgs == nil {
				msgs = []dlqMessage{}
			}
			return a.show(msgs, func() error {
				rows := make([][]string, 0, len(msgs))
				for _, m := range msgs {
					rows = append(rows, []string{m.ID, orDash(m.Tenant), orDash(m.Job), orDash(m.Step), strconv.Itoa(m.Receives), when(&m.SentAt), orDash(m.Source)})
				}
				if err := a.table([]string{"MESSAGE", "TENANT", "JOB", "STEP", "RECEIVES", "SENT", "SOURCE"}, rows); err != nil {
					return err
				}
				_, err := fmt.Fprintf(a.stderr, "%d message(s) in %s\n", len(msgs), url)
				return err
			})
		},
	}
	list.Flags().IntVar(&max, "max", 100, "messages to show at most")
	var job string
	var redriveMax int
	redrive := &cobra.Command{
		Use: "redrive", Short: "Send dead-lettered messages back to their step's queue", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			t, err := a.target(ctx, o)
			if err != nil {
				return err
			}
			if err := t.needTable(); err != nil {
				return err
			}
			rep, err := redriveDLQ(ctx, t, job, redriveMax)
			if err != nil {
				return err
			}
			return a.show(rep, func() error {
				fmt.Fprintf(a.stdout, "sent back %d message(s)\n", rep.Sent)
				for _, l := range rep.Left {
					fmt.Fprintf(a.stdout, "  left %s (job %s step %s): %s\n", l.ID, orDash(l.Job), orDash(l.Step), l.Why)
				}
				return nil
			})
		},
	}
	redrive.Flags().StringVar(&job, "job", "", "only the messages of this job")
	redrive.Flags().IntVar(&redriveMax, "max", 1000, "messages to send back at most")
	cmd.AddCommand(list, redrive)
	return cmd
}

// receive takes up to n messages, hidden for hide.
func receive(ctx context.Context, c *sqs.Client, url string, n int, hide time.Duration) ([]dlqMessage, error) {
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: int32(min(n, 10)), WaitTimeSeconds: 1, VisibilityTimeout: int32(hide / time.Second),
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", url, err)
	}
	msgs := make([]dlqMessage, 0, len(out.Messages))
	for _, m := range out.Messages {
		d := dlqMessage{ID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), receipt: aws.ToString(m.ReceiptHandle)}
		var body engine.Message
		if json.Unmarshal([]byte(d.Body), &body) == nil {
			d.Tenant, d.Job, d.Step = body.Tenant, body.Job, body.Step
		}
		d.Receives, _ = strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
		if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
			d.SentAt = time.UnixMilli(ms)
		}
		d.Source = m.Attributes["DeadLetterQueueSourceArn"]
		d.group = m.Attributes["MessageGroupId"]
		msgs = append(msgs, d)
	}
	return msgs, nil
}

// show makes messages visible again at once.
func show(ctx context.Context, c *sqs.Client, url string, msgs []dlqMessage) error {
	for len(msgs) > 0 {
		n := min(len(msgs), 10)
		var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
		for i, m := range msgs[:n] {
			entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.receipt), VisibilityTimeout: 0})
		}
		if _, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url, Entries: entries}); err != nil {
			return fmt.Errorf("show messages again in %s: %w", url, err)
		}
		msgs = msgs[n:]
	}
	return nil
}

// peek receives up to max messages, each once, and shows them again.
func peek(ctx context.Context, c *sqs.Client, url string, max int) ([]dlqMessage, error) {
	var msgs []dlqMessage
	seen := map[string]bool{}
	for len(msgs) < max {
		got, err := receive(ctx, c, url, max-len(msgs), 30*time.Second)
		if err != nil {
			return msgs, errors.Join(err, show(ctx, c, url, msgs))
		}
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			if !seen[m.ID] {
				seen[m.ID] = true
				msgs = append(msgs, m)
			}
		}
	}
	return msgs, show(ctx, c, url, msgs)
}

// redriveReport is what a redrive did.
type redriveReport struct {
	Sent int       `json:"sent"`
	Left []leftMsg `json:"left,omitempty"`
}

type leftMsg struct {
	ID   string `json:"message_id"`
	Job  string `json:"job,omitempty"`
	Step string `json:"step,omitempty"`
	Why  string `json:"why"`
}

// redriveDLQ sends dead-lettered messages back: each to the queue its
// step's messages go to (read from its job), else to the queue SQS says
// it came from; one it can place nowhere stays. Sends are batched per
// queue; a message is deleted from the dead-letter queue once sent.
func redriveDLQ(ctx context.Context, t *target, onlyJob string, max int) (redriveReport, error) {
	var rep redriveReport
	c := sqs.NewFromConfig(t.cfg)
	url, err := t.dlq(ctx, c)
	if err != nil {
		return rep, err
	}
	st := store.New(dynamodb.NewFromConfig(t.cfg), t.table)
	q := queue.New(c, queue.Config{ReadyURLs: t.ready, DLQARN: t.dlqARN, WorkerQueuePrefix: t.workerPrefix})
	var kept []dlqMessage // made visible again at the end, so this run does not receive them twice
	defer func() { _ = show(context.WithoutCancel(ctx), c, url, kept) }()
	for rep.Sent+len(kept) < max {
		msgs, err := receive(ctx, c, url, max-rep.Sent-len(kept), 60*time.Second)
		if err != nil {
			return rep, err
		}
		if len(msgs) == 0 {
			return rep, nil
		}
		byURL := map[string][]dlqMessage{}
		for _, m := range msgs {
			if onlyJob != "" && m.Job != onlyJob {
				kept = append(kept, m)
				continue
			}
			dest, group, why := destination(ctx, t, st, q, c, m)
			if dest == "" {
				kept = append(kept, m)
				rep.Left = append(rep.Left, leftMsg{ID: m.ID, Job: m.Job, Step: m.Step, Why: why})
				continue
			}
			m.group = group
			byURL[dest] = append(byURL[dest], m)
		}
		for dest, ms := range byURL {
			sent, err := sendBack(ctx, c, url, dest, ms)
			rep.Sent += sent
			if err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// destination answers where a message goes back to and its message group
// (a ready queue's messages carry their tenant's), or why nowhere.
func destination(ctx context.Context, t *target, st *store.Store, q *queue.Queue, c *sqs.Client, m dlqMessage) (url, group, why string) {
	if m.Job != "" && m.Tenant != "" {
		j, err := st.Get(ctx, m.Tenant, m.Job)
		if err == nil {
			s, _, err := j.Step(m.Step)
			if err != nil {
				return "", "", fmt.Sprintf("job %s has no step %q", m.Job, m.Step)
			}
			to := engine.DestinationOf(j, s)
			u, err := q.URLFor(ctx, j.Tenant, to)
			if err != nil {
				return "", "", err.Error()
			}
			if to.Kind == engine.ToReady {
				group = m.Tenant
			}
			return u, group, ""
		}
		why = fmt.Sprintf("job %s of tenant %s: %v", m.Job, m.Tenant, err)
	} else {
		why = "not a stepflow message"
	}
	if m.Source != "" {
		parts := strings.Split(m.Source, ":")
		out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(parts[len(parts)-1])})
		if err == nil {
			return aws.ToString(out.QueueUrl), m.group, ""
		}
		why += fmt.Sprintf("; its source queue %s: %v", m.Source, err)
	}
	return "", "", why
}

// sendBack sends messages to dest, up to ten a request, and deletes from
// the dead-letter queue those sent.
func sendBack(ctx context.Context, c *sqs.Client, dlqURL, dest string, msgs []dlqMessage) (int, error) {
	sent := 0
	for len(msgs) > 0 {
		n := min(len(msgs), 10)
		batch := msgs[:n]
		msgs = msgs[n:]
		var entries []sqstypes.SendMessageBatchRequestEntry
		for i, m := range batch {
			e := sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(m.Body)}
			if m.group != "" {
				e.MessageGroupId = aws.String(m.group)
			}
			entries = append(entries, e)
		}
		out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &dest, Entries: entries})
		if err != nil {
			return sent, fmt.Errorf("send back to %s: %w", dest, err)
		}
		var dels []sqstypes.DeleteMessageBatchRequestEntry
		for _, ok := range out.Successful {
			i, _ := strconv.Atoi(aws.ToString(ok.Id))
			dels = append(dels, sqstypes.DeleteMessageBatchRequestEntry{Id: ok.Id, ReceiptHandle: aws.String(batch[i].receipt)})
		}
		if len(dels) > 0 {
			if _, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &dlqURL, Entries: dels}); err != nil {
				// Sent but not deleted: it comes back after its visibility
				// timeout, and a second delivery is settled as a duplicate.
				return sent + len(dels), fmt.Errorf("delete sent messages from the dead-letter queue: %w", err)
			}
		}
		sent += len(dels)
		if len(out.Failed) > 0 {
			return sent, fmt.Errorf("send back to %s: %d of %d refused: %s", dest, len(out.Failed), n, aws.ToString(out.Failed[0].Message))
		}
	}
	return sent, nil
}
