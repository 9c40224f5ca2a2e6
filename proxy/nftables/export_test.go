package nftables

// CompactLog lets a test fold the delta log at every change.
var CompactLog = &compactLog
