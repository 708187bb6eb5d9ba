"""Node bootstrap: jinja2 templates + versions manifest -> EC2 user data."""
