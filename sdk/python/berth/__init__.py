"""berth: serverless compute on your own GPU fleet."""

from .client import BerthError, Client
from .config import ConfigError, Credentials, current_credentials

__all__ = ["BerthError", "Client", "ConfigError", "Credentials", "current_credentials"]
__version__ = "0.1.0"
