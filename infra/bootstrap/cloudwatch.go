package bootstrap

// cloudWatch is why bootstrap ignores the dashboard and the alarms:
// nothing emulates CloudWatch metrics locally. `make dev` writes the EMF
// records they are drawn from to .stepflow/metrics-<addr>.log, and GET
// /v1/metrics answers the same figures.
const cloudWatch = "CloudWatch dashboards and alarms are AWS's: locally the EMF records go to .stepflow/metrics-<addr>.log and the figures to GET /v1/metrics"

// dashboardKeys declares the AWS::CloudWatch::Dashboard properties, all
// ignored: nothing creates a dashboard locally.
var dashboardKeys = keySet{
	"DashboardName": cloudWatch,
	"DashboardBody": cloudWatch,
}

// alarmKeys declares the AWS::CloudWatch::Alarm properties, all ignored:
// nothing creates an alarm locally.
var alarmKeys = keySet{
	"AlarmName":          cloudWatch,
	"AlarmDescription":   cloudWatch,
	"Namespace":          cloudWatch,
	"MetricName":         cloudWatch,
	"Dimensions":         cloudWatch,
	"Statistic":          cloudWatch,
	"Metrics":            cloudWatch,
	"Period":             cloudWatch,
	"EvaluationPeriods":  cloudWatch,
	"DatapointsToAlarm":  cloudWatch,
	"Threshold":          cloudWatch,
	"ComparisonOperator": cloudWatch,
	"TreatMissingData":   cloudWatch,
	"AlarmActions":       cloudWatch,
	"OKActions":          cloudWatch,
}
