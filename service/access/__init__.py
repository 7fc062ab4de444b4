"""Who a request acts for and whether it may go ahead: API keys, admission, quotas."""
