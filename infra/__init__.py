"""The Tidings CDK app (``python -m infra.app``)."""

import os

# jsii warns on every run about the Node.js version it runs on; the app works with Node 20.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
