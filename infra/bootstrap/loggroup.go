package bootstrap

// cloudWatchLogs is why bootstrap ignores the functions' logging settings
// and log groups: locally the runner's handlers log to its stderr in
// `make dev`'s lines, at its own level.
const cloudWatchLogs = "CloudWatch Logs is AWS's: locally the functions log to the runner's stderr"

// logGroupKeys declares the AWS::Logs::LogGroup properties, all ignored:
// nothing creates a log group locally.
var logGroupKeys = keySet{
	"LogGroupName":    cloudWatchLogs,
	"RetentionInDays": cloudWatchLogs,
}
