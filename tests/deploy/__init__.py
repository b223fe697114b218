"""Tests of deploy/: manifests, alert rules, dashboards, the image."""
