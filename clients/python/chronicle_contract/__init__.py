"""The wire contract: request and reply models, subjects and error codes; imports no database or server driver."""
