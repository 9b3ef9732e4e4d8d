"""The engines whose /metrics page check_vllm reads, one row each: which samples give the numbers the judge
reads (check_vllm.contract.values.EngineReading's fields), which label tells one engine of a page from another,
how the output names it, and which of its server's routes the check may ask. The judge judges readings and never
asks which engine gave them: the page's reader (check_vllm.server.reading) picks the row by the families the page
carries (or by --engine), and the calls (check_vllm.server.calls, check_vllm.observe) ask only the routes its row
names. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract.vocab import PAUSED, STOPPING


class Router(NamedTuple):
    """A server that routes each request to a process of its own per model, started on demand (llama.cpp's
    router mode): each loaded model's page is read as one engine of the server, and no request of the check ever
    makes it load a model ("" or (): the server has no such mode)."""

    #: What its /metrics answers when no model is named: how a router is told from a server without metrics.
    unnamed: str = ""
    #: Lists every model with its state (`status.value`).
    models: str = ""
    #: The query parameter naming the model a GET is for (a POST names it in its body).
    select: str = ""
    #: The query every read and probe carries, so that a model not loaded is refused, never loaded.
    no_load: str = ""
    #: The states of a model whose process serves its page (read, probed when idle); of one asleep (read only).
    serving: tuple[str, ...] = ()
    sleeping: tuple[str, ...] = ()


class Routes(NamedTuple):
    """What an engine's server serves beyond /metrics, /v1/models and /v1/completions: each is asked only on the
    path that needs it ("" or (): the server has no such route, and it is never asked)."""

    #: /metrics/?name[]=... (prometheus_client's own app): the restricted page, a tenth of the whole.
    metrics_filter: bool = False
    #: Says whether the engine is paused on purpose (asked on a stall only).
    paused: str = ""
    #: The fault-tolerance status, newest route first (asked on a stall only).
    faults: tuple[str, ...] = ()
    #: The checkpoint status (asked after a request was turned away as paused).
    checkpoint: str = ""
    #: Answered from the API server's own state, 503 with an empty body once the engine died (asked after a 5xx).
    engine_dead: str = ""
    #: Routes that cost the engine work (a generation behind a health URL): never asked, whatever happens.
    never: tuple[str, ...] = ()
    #: The paused route answers by its status, not a JSON `is_paused` (SGLang's /ready: 503 while paused), and
    #: says paused only while `healthy` answers 200 (SGLang's /ping: /ready is 503 after a failed health check too).
    paused_by_status: bool = False
    healthy: str = ""
    #: Says whether the server sleeps (unloaded its model when idle, reloads it on the next request): a JSON
    #: `is_sleeping` answered from a cache, no task (llama.cpp's /props). Asked before an idle probe only.
    asleep: str = ""
    #: Each slot's task and tokens, exact (llama.cpp's /slots: a task of its queue, like /metrics): asked only when
    #: its page printed the progress counters too coarsely while work is present.
    slots: str = ""
    #: How its server reads in router mode (one process per model, each started on demand); Router(): no such mode.
    router: Router = Router()
    #: Answers 200 once the model is loaded, and not while it loads, from the HTTP side whatever the engine loop
    #: does (llama.cpp's /health: 503 "Loading model" until then): asked only when the host would call a young
    #: process that never served `starting`. A server that says it has loaded is not starting.
    loaded: str = ""


class Engine(NamedTuple):
    #: How the output names it, and what --engine calls it.
    name: str
    #: Its families' prefix on the page.
    prefix: str
    #: Sample name -> EngineReading field. Counters keep `_total` on their samples.
    samples: Mapping[str, str]
    #: Counters' `_created` samples (prometheus_client's): the birth of the process that owns them.
    created: frozenset[str] = frozenset()
    #: The label naming one engine of a page (data parallel); "": the page is one engine.
    engine_label: str = ""
    #: The work gauges, as a missing-work message names them.
    work: str = ""
    #: The first word of the status line (the plugin's name for what it checks).
    label: str = "VLLM"
    #: What --engine takes, and what a Reading and the state file carry.
    key: str = "vllm"
    #: How the host's witness knows its server's command line: a program (argv[0]'s base name) that is the
    #: server, a program whose `serve` subcommand runs it (`vllm serve`), a module (`python -m M`, or M's file);
    #: and the port it serves when its command line names none.
    programs: tuple[str, ...] = ()
    serves: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    default_port: int = 8000
    #: Fields whose samples are summed over their series (one per finished reason, per mode); any other field
    #: keeps one series' value (a duplicated gauge series of a broken exporter is not doubled).
    summed: frozenset[str] = frozenset()
    #: The label that splits a family across fields ("mode": `name|mode=decode` in `samples`).
    split: str = ""
    #: A sample whose label names the process that owns the engine's counters (SGLang's per-process gauges carry
    #: a `pid`): ("", "") where none does. Read as EngineReading.created, the counters' owner.
    owner: tuple[str, str] = ("", "")
    #: A response header of its /metrics naming the process that serves it (llama.cpp's start instant): read as
    #: EngineReading.created, an identity, never a time.
    owner_header: str = ""
    #: Its work gauges are written only now and then (after a batch, every N steps), so work they show with no
    #: progress proves nothing: the idle probe tells idle from hung. Progress is proof of work.
    lagging_gauges: bool = False
    routes: Routes = Routes()
    #: Its samples the reader reads beyond `samples` (sleep state, start time, waiting by reason, weight updates):
    #: asked on its restricted page too.
    also: frozenset[str] = frozenset()
    #: Its server's own words, in a 503's {"error": "..."}, that it holds itself on purpose, each with the verdict
    #: word it means (a pause: quiet on purpose, never restarted; a rank retired: stopping).
    holding: tuple[tuple[str, str], ...] = ()
    #: The server flag that turns its /metrics on ("": always on), named when it is off.
    metrics_flag: str = ""
    #: What its /v1/models says each model is `owned_by`: whose server it is where no page says (metrics off,
    #: guarded by its key).
    owned_by: str = "vllm"
    #: Significant digits its page prints a value with (0: exact): a counter at or past 10**digits may not move
    #: visibly between two readings, so its standing still proves nothing.
    counter_digits: int = 0
    #: Where its server takes its port besides --port: an environment variable (read from the process where this
    #: user may), a YAML file named by a flag (its top-level `port:`). The command line wins over both.
    port_env: str = ""
    config_flag: str = ""
    #: The flag by which its server sleeps after that many idle seconds (a probe would keep it awake).
    sleep_flag: str = ""


VLLM = Engine(
    "vLLM", "vllm:",
    MappingProxyType({
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:iteration_tokens_total_count": "steps",
        "vllm:iteration_tokens_total_sum": "step_tokens",
        "vllm:generation_tokens_total": "generation_tokens",
        "vllm:prompt_tokens_total": "prompt_tokens",
        "vllm:request_success_total": "finished",
        "vllm:kv_cache_usage_perc": "kv_cache",
        "vllm:gpu_cache_usage_perc": "kv_cache",  # vLLM < 0.10 (V0) name
        "vllm:num_preemptions_total": "preemptions",
    }),
    frozenset({"vllm:generation_tokens_created", "vllm:prompt_tokens_created", "vllm:request_success_created",
               "vllm:iteration_tokens_total_created"}),
    engine_label="engine", work="vllm:num_requests_running/waiting",
    serves=("vllm",), modules=("vllm.entrypoints.openai.api_server",), summed=frozenset({"finished"}),
    config_flag="--config",
    # 0.34: vllm/entrypoints/serve/elastic_ep/middleware.py ScalingMiddleware: every path but /health and
    # /is_scaling_elastic_ep (/metrics too) answers 503 {"error": ...} while it scales or once its rank retired
    holding=(("The model is currently scaling", PAUSED), ("rank has been retired and is awaiting shutdown", STOPPING)),
    also=frozenset({"vllm:engine_sleep_state", "process_start_time_seconds", "vllm:num_requests_waiting_by_reason",
                    "vllm:rl_weight_update_operations_in_flight", "vllm:rl_weight_update_operations_total"}),
    routes=Routes(
        metrics_filter=True,
        paused="/is_paused",  # >= 0.32 with VLLM_SERVER_DEV_MODE=1
        # 0.34 (vllm/entrypoints/serve/fault_tolerance/api_router.py get_status), then 0.33's; served only
        # with --enable-fault-tolerance (vllm/entrypoints/launchers/api_server/routers.py)
        faults=("/v1/fault_tolerance/status", "/fault_tolerance/status"),
        checkpoint="/checkpoint/status",  # >= 0.34 with --enable-sleep-mode
        engine_dead="/health",  # every release 0.27-0.34 (vllm/entrypoints/serve/instrumentator/health.py)
    ),
)

#: llama.cpp's `llama-server --metrics` (tools/server/server.cpp, the metrics route): no labels, no
#: `_created`; `n_decode_total` counts llama_decode() calls, a step counter that moves on every decode, while
#: `tokens_predicted_total` moves only when a request ends: not read (a request of minutes would show 0 tok/s,
#: then thousands at its end). `requests_processing` is the work gauge, `requests_deferred` the queue. The
#: per-second gauges (predicted_tokens_seconds) are reset by every read: never read. Its routes: /metrics
#: ignores a query and 404s `/metrics/`; /health answers from the HTTP thread (200 while the decode loop is
#: stopped, 503 while loading), so it proves nothing of the engine; no pause, fault or checkpoint route. The
#: `Process-Start-Time-Unix` header of /metrics is ggml_time_us() at start: the host's monotonic clock in
#: microseconds, whatever its name says; it changes with the process, so it names the process.
LLAMA_CPP = Engine(
    "llama.cpp", "llamacpp:",
    MappingProxyType({
        "llamacpp:requests_processing": "running",
        "llamacpp:requests_deferred": "waiting",
        "llamacpp:n_decode_total": "steps",
        "llamacpp:prompt_tokens_total": "prompt_tokens",
    }),
    work="llamacpp:requests_processing/requests_deferred", label="LLAMACPP", key="llamacpp",
    owner_header="Process-Start-Time-Unix",
    programs=("llama-server",), default_port=8080,  # common/arg.cpp: --port, LLAMA_ARG_PORT; 8080
    # common/arg.cpp: the environment is applied first, the command line after it (it wins); --metrics or
    # LLAMA_ARG_ENDPOINT_METRICS, else /metrics answers 501; --sleep-idle-seconds has no environment variable.
    # tools/server/server-context.cpp: values printed with std::to_string-free ostream defaults, 6 digits.
    metrics_flag="--metrics", owned_by="llamacpp", counter_digits=6, port_env="LLAMA_ARG_PORT", sleep_flag="--sleep-idle-seconds",
    # tools/server/server-models.cpp (router mode: --models-dir or --models-preset, no -m): a GET names its model by
    # `?model=`, a POST by its body's "model"; either loads a model not loaded unless `autoload=false` (is_autoload:
    # the query, for a POST too), then 400 "model is not loaded"; /metrics without a model answers 400
    # (router_validate_model); GET /v1/models gives each model's status.value (server_model_status_to_string). A
    # "loading" model's process does not serve yet; a "sleeping" one answers /metrics from its cache, no task.
    routes=Routes(asleep="/props", slots="/slots", loaded="/health", router=Router(
        unnamed="model name is missing from the request", models="/v1/models", select="model",
        no_load="autoload=false", serving=("loaded",), sleeping=("sleeping",))),
)

#: SGLang 0.5.23 with --enable-metrics, read from its source (tests/fixtures/source/sglang-0.5.23/README.md names
#: the file and function of each rule): prometheus_client in multiprocess mode (no `_created`), scheduler families
#: labelled by rank (`dp_rank` with data parallel). `cuda_graph_passes_total` moves by one per forward pass (every
#: mode: the steps), `realtime_tokens_total` by the batch's tokens every step; the request counters move only when
#: a request ends and carry no rank (not read). Its work gauges (num_running_reqs, num_queue_reqs, token_usage)
#: are written after a prefill batch, every 40 decode steps and by an idle pass: they lag. Its /health and
#: /health_generate are real generations (up to 20 s): never asked; it has no pause, fault or engine-dead route the
#: check could read. `/metrics/?name[]=` is prometheus_client's filter: once a page said SGLang, its restricted page.
SGLANG = Engine(
    "SGLang", "sglang:",
    MappingProxyType({
        "sglang:num_running_reqs": "running",
        "sglang:num_queue_reqs": "waiting",
        "sglang:cuda_graph_passes_total": "steps",
        "sglang:realtime_tokens_total|mode=decode": "generation_tokens",
        "sglang:realtime_tokens_total|mode=prefill_compute": "prompt_tokens",
        "sglang:token_usage": "kv_cache",
    }),
    engine_label="dp_rank", work="sglang:num_running_reqs/num_queue_reqs", label="SGLANG", key="sglang",
    serves=("sglang",), modules=("sglang.launch_server",), default_port=30000,
    summed=frozenset({"steps"}), split="mode", lagging_gauges=True, owner=("sglang:num_retracted_reqs", "pid"),
    # srt/entrypoints/http_server.py: /ready is 200 iff not paused and healthy, /ping 200 iff healthy (a paused
    # server too); /metrics is mounted only with --enable-metrics; its `name[]` filter goes through a registry
    # that holds no multiprocess collector by name: an empty page, so it is never asked.
    routes=Routes(paused="/ready", paused_by_status=True, healthy="/ping", never=("/health", "/health_generate")),
    metrics_flag="--enable-metrics", owned_by="sglang", config_flag="--config",
)

#: Every engine, the first the default where a page says nothing.
ENGINES = (VLLM, LLAMA_CPP, SGLANG)
#: The engine of a page that carries no other row's families.
DEFAULT = ENGINES[0]
#: Each row by its key, and by the name the output gives it (a ServerProcess's engine).
BY_KEY: Mapping[str, Engine] = MappingProxyType({row.key: row for row in ENGINES})
BY_NAME: Mapping[str, Engine] = MappingProxyType({row.name: row for row in ENGINES})
#: What --engine takes besides the keys: the page says.
AUTO = "auto"
#: Each sample name the rows read, with its row.
ROW_OF: Mapping[str, Engine] = MappingProxyType({name.split("|", 1)[0]: row for row in ENGINES
                                                 for name in (*row.samples, *row.created, row.owner[0]) if name})
