"""Configuration: the only reader of `RUNNER_*` variables, and where every refusal to start is decided.
Every entry point calls `load(environ, cli)` and is handed a frozen, opened `Deployment`.

Its rooms: `loading` (`load`: the checkout's defaults, the command line, the rules between variables),
`settings` (how one variable is declared, read from its text, documented), `variables` (every
variable, declared once), `removed` (names that were settings once), `values` (`Config`, the frozen
configuration read from the text), `sections` (its parts, each consumer's: `config.limits`, `config.kept`,
...), `disk` (what the configuration names on disk, looked at and filled in),
`locks` (the locks and wheels the package environment and the wheelhouse are made from), `tokens`
(the HTTP tokens file), `wheelhouse` (what the wheelhouse offers, read once), `memory` (the sessions'
memory budget).
It imports no side of the server: each side reads the frozen value it is handed.

Three words, one meaning each: a *variable* is a `RUNNER_*` name in the environment; a *setting* is
its declaration (a `Setting`: the variable, its field, kind, unit, range and meaning); the
*configuration* is the values read (`Config`, handed out in sections), opened on disk.

Must not import: `runner.protocol`, `runner.transports`, `runner.execution`, `runner.processes`,
`runner.inrun`, or the SDK.
"""

from runner.config.egress import EgressAllow as EgressAllow
from runner.config.loading import Cli as Cli
from runner.config.loading import Deployment as Deployment
from runner.config.loading import load as load
from runner.config.sections import EgressConfig as EgressConfig
from runner.config.sections import IsolationConfig as IsolationConfig
from runner.config.sections import KeptConfig as KeptConfig
from runner.config.sections import LimitsConfig as LimitsConfig
from runner.config.sections import LoggingConfig as LoggingConfig
from runner.config.sections import PackagesConfig as PackagesConfig
from runner.config.sections import PoolConfig as PoolConfig
from runner.config.sections import ReturnsConfig as ReturnsConfig
from runner.config.sections import ServingConfig as ServingConfig
from runner.config.sections import SessionsConfig as SessionsConfig
from runner.config.sections import TasksConfig as TasksConfig
from runner.config.sections import ToolsConfig as ToolsConfig
from runner.config.settings import KIB as KIB
from runner.config.settings import MIB as MIB
from runner.config.settings import markdown_table as markdown_table
from runner.config.tools import Downstream as Downstream
from runner.config.tools import ToolServers as ToolServers
from runner.config.tools import python_name as python_name
from runner.config.values import DEFAULT_PRELOAD as DEFAULT_PRELOAD
from runner.config.values import OPERATIONS_PATHS as OPERATIONS_PATHS
from runner.config.values import PROVIDED_DIRECTORY as PROVIDED_DIRECTORY
from runner.config.values import SETTINGS as SETTINGS
from runner.config.values import Config as Config
from runner.config.values import HttpConfig as HttpConfig
from runner.config.values import SandboxMode as SandboxMode
from runner.config.values import SandboxNetwork as SandboxNetwork
from runner.config.values import Transport as Transport
from runner.logs import LogFormat as LogFormat
from runner.logs import LogLevel as LogLevel
