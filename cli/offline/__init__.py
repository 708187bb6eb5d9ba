"""Run the real Pulumi program under the SDK's mock engine: no CLI, no plugins, no credentials."""
