# DEMO KEY for the local APNsSandbox only - never use it with Apple or in production
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgu9fNA7U4VAsI7gJw
WLTfIRf+0eHUZ5wBkE7mIpuvwmihRANCAARgoroY3Y9xqp+procb/TnF7jO0sxwz
xduA7dsQYL6pqF0+LXDtgALF+EZ2qHkZVXmir3QYkotAewBzHqcBCrrN
-----END PRIVATE KEY-----
