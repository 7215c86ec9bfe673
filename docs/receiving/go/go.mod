module example.com/tidings-receiver

go 1.21

require github.com/standard-webhooks/standard-webhooks/libraries v0.0.1
