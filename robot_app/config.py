"""Typed configuration: one TOML file, every key with a default, validated at start.

The robot reads ``/etc/robot-app/config.toml``; any command takes ``--config PATH`` instead. A missing
file means "all defaults". Unknown sections or keys, wrong types and out-of-range values raise
:class:`ConfigError` naming the file and the dotted key, so a typo never silently becomes a default.

Each section is a frozen dataclass below; a field's ``metadata`` may give ``min``/``max`` (inclusive
bounds) and ``choices``. Nothing here is read at import time: ``main()`` calls :func:`load_config`
and passes the result down.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from robot_app.nav.policy import NavOptions
from robot_app.nav.walk_following import WalkRules

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on the robot's Python 3.10
    import tomli as tomllib

DEFAULT_CONFIG_PATH = Path("/etc/robot-app/config.toml")


class ConfigError(ValueError):
    """A configuration file is unreadable, has an unknown key, or a value of the wrong type or range."""


def _opt(default: Any, *, min: float | None = None, max: float | None = None,
         choices: tuple | None = None, doc: str = "") -> Any:
    meta = {"min": min, "max": max, "choices": choices, "doc": doc}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class PathsConfig:
    """Where the app keeps its files on the robot."""

    models_dir: str = _opt("/var/lib/robot-app/models", doc="ONNX/GGUF models and their JSON sidecars")
    maps_dir: str = _opt("/var/lib/robot-app/maps", doc="topological map files (SQLite)")
    logs_dir: str = _opt("/var/lib/robot-app/logs", doc="traversal logs recorded while driving")
    kernels_dir: str = _opt("/var/cache/robot-app/kernels",
                            doc="walk-search kernels compiled for this CPU (robot-app kernels build); "
                                "missing or stale = numba's JIT kernels")


@dataclass(frozen=True)
class PlannerConfig:
    """LM-Nav walk search (LM-Nav Sec. 4.4, Alg. 1)."""

    planner: str = _opt("lmnav", choices=("lmnav", "max-likelihood"))
    alpha: float = _opt(0.005, min=0.0, doc="weight per VNM time step against grounding log-likelihoods (core.search)")
    logit_scale: float = _opt(0.0, min=0.0, doc="logit scale applied to CLIP cosine similarities; "
                                                "0 = the model's own (sidecar; 100 for OpenAI CLIP)")
    normalise: str = _opt("nodes", choices=("nodes", "landmarks"),
                          doc="softmax over the map's nodes per landmark (paper's P(i|t)) or over landmarks")
    max_cosine: float = _opt(1.0, min=-0.99, max=1.0,
                             doc="CLIP cosines above this count a tenth as much in the grounding "
                                 "(core.grounding.CAP_SLOPE: every clear view of a landmark nearly alike, so "
                                 "that the walk length picks among them); 1 = off, LM-Nav's objective")


@dataclass(frozen=True)
class RobotConfig:
    """Jackal kinematics and limits (jackal_description, jackal_control; docs/protocols.md, "Kinematics and limits")."""

    wheel_radius_m: float = _opt(0.098, min=0.01, max=1.0)
    wheel_separation_m: float = _opt(0.563, min=0.05, max=3.0,
                                     doc="effective separation: track 0.37559 m x multiplier 1.5")
    max_v_mps: float = _opt(2.0, min=0.0, max=5.0)
    max_accel_mps2: float = _opt(20.0, min=0.0)
    max_omega_radps: float = _opt(4.0, min=0.0, max=10.0)
    max_alpha_radps2: float = _opt(25.0, min=0.0)
    control_rate_hz: float = _opt(50.0, min=1.0, max=500.0)
    cmd_timeout_s: float = _opt(0.25, min=0.01, max=5.0)
    backend: str = _opt("serial", choices=("serial", "ros2"),
                        doc="serial: the ROS 1 Jackal MCU (rosserial) and devices of [serial]; ros2: a ROS 2 robot's "
                            "topics over DDS as [ros2] says (the ros2 extra, cyclonedds)")


_BAUDS = (9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600)


@dataclass(frozen=True)
class SerialConfig:
    """Serial devices (firmware_bridge): base MCU (rosserial), GPS (NMEA), IMU (Microstrain MIP).

    Defaults as the stock Jackal stack has them (docs/protocols.md, "Devices and ports"): MCU 115200 baud at
    /dev/jackal; Novatel GPS 57600 baud; Microstrain 115200 baud; rosserial_server reopens a failed port every
    2 s and drops a link that sends no valid frame within 5 s.
    """

    base_port: str = _opt("/dev/jackal", doc="base MCU serial port (rosserial)")
    base_baud: int = _opt(115200, choices=_BAUDS)
    gps_source: str = _opt("mcu", choices=("mcu", "serial", "none"),
                           doc="NMEA from the MCU topic navsat/nmea_sentence, or a separate receiver")
    gps_port: str = _opt("/dev/clearpath/gps", doc="separate NMEA receiver (gps_source = serial)")
    gps_baud: int = _opt(57600, choices=_BAUDS)
    gps_ignore_checksum_for: list[str] = _opt([], doc="NMEA sentence types whose wrong checksum is tolerated")
    gps_max_age_s: float = _opt(1.5, min=0.0, max=10.0,
                                doc="how old RMC/VTG/GST/HDT data may be to be attached to a fix")
    gps_allow_dead_reckoning: bool = _opt(False, doc="report dead-reckoning / estimated NMEA positions (GGA "
                                                     "quality 6, mode E) as fixes (quality 6)")
    gps_max_sentence_chars: int = _opt(82, min=82, max=200,
                                       doc="longest NMEA sentence accepted, $ through CR LF (NMEA 0183: 82; "
                                           "raise it for receivers past the standard, e.g. u-blox "
                                           "high-precision NMEA)")
    imu_source: str = _opt("mcu", choices=("mcu", "mip", "none"),
                           doc="IMU from the MCU topics imu/data_raw + imu/mag, or a Microstrain on its own port")
    imu_port: str = _opt("/dev/microstrain")
    imu_baud: int = _opt(115200, choices=_BAUDS)
    imu_rate_hz: float = _opt(100.0, min=1.0, max=1000.0, doc="Microstrain IMU data rate (imu_source = mip)")
    reconnect_min_s: float = _opt(0.25, min=0.01, max=60.0, doc="first reconnect delay; doubles per failure")
    reconnect_max_s: float = _opt(2.0, min=0.01, max=60.0, doc="longest reconnect delay")
    handshake_timeout_s: float = _opt(5.0, min=0.1, max=60.0,
                                      doc="no valid frame from the MCU within this: the link is dropped and the "
                                          "port reopened (rosserial_server: 5 s)")
    bad_log_interval_s: float = _opt(10.0, min=0.0, doc="at most one warning about bad input per this period")


@dataclass(frozen=True)
class Ros2Config:
    """The ``ros2`` backend (``[robot] backend = "ros2"``): a ROS 2 robot's topics over DDS (Eclipse Cyclone DDS,
    the ros2 extra). Topic names are relative to ``namespace`` unless they start with "/"; an empty topic
    subscribes nothing. Defaults: Clearpath's ROS 2 robot API (docs.clearpathrobotics.com, "ROS 2 Robot API":
    one namespace per robot, ``<platform>_<serial>`` such as j100_0000; velocity on cmd_vel, fused odometry
    platform/odom/filtered, e-stop platform/emergency_stop, battery platform/bms/state, the first GPS / IMU /
    camera under sensors/gps_0, imu_0, camera_0); check yours with ``ros2 topic list`` on the robot.
    """

    namespace: str = _opt("/j100_0000", doc="the robot's ROS namespace (Clearpath: /<platform>_<serial number>; "
                                            "\"\" for none)")
    domain_id: int = _opt(0, min=0, max=232, doc="ROS_DOMAIN_ID of the robot's ROS 2 graph")
    cyclonedds_config: str = _opt("", doc="Cyclone DDS XML or file:// URI (network interface, peers); empty: "
                                          "Cyclone's defaults or the CYCLONEDDS_URI environment variable")
    cmd_topic: str = _opt("cmd_vel", doc="velocity command topic (Clearpath: cmd_vel into twist_mux)")
    cmd_type: str = _opt("twist", choices=("twist", "twist_stamped"),
                         doc="geometry_msgs/Twist (ROS 2 Humble) or TwistStamped (Jazzy)")
    odom_topic: str = _opt("platform/odom/filtered", doc="nav_msgs/Odometry -> wheel feedback")
    estop_topic: str = _opt("platform/emergency_stop", doc="std_msgs/Bool, true while e-stopped")
    battery_topic: str = _opt("platform/bms/state", doc="sensor_msgs/BatteryState -> battery voltage")
    gps_topic: str = _opt("sensors/gps_0/fix", doc="sensor_msgs/NavSatFix")
    imu_topic: str = _opt("sensors/imu_0/data", doc="sensor_msgs/Imu")
    camera_topic: str = _opt("sensors/camera_0/color/compressed",
                             doc="camera images when [camera] source = \"ros2\"")
    camera_type: str = _opt("compressed", choices=("compressed", "raw"),
                            doc="sensor_msgs/CompressedImage (JPEG/PNG) or raw sensor_msgs/Image")


@dataclass(frozen=True)
class ModelsConfig:
    """ONNX Runtime models (CLIP, VNM, text embedding) in ``[paths] models_dir``; see docs/models.md."""

    providers: list[str] = _opt(["CUDAExecutionProvider", "CPUExecutionProvider"],
                                choices=("TensorrtExecutionProvider", "CUDAExecutionProvider",
                                         "CPUExecutionProvider"),
                                doc="onnxruntime execution providers in order of preference; ones this "
                                    "build lacks are skipped, CPU is always the last resort")
    intra_op_threads: int = _opt(0, min=0, max=64, doc="threads per operator; 0 = onnxruntime's choice")
    allow_spinning: bool = _opt(False, doc="onnxruntime worker threads busy-wait between operators; off "
                                            "keeps 2+ threads from being slower than 1 when other "
                                            "processes load the CPU (docs/benchmarks.md, threads)")
    tensorrt_fp16: bool = _opt(True, doc="TensorRT provider (Jetson): build fp16 engines (trt_fp16_enable); use "
                                         "the fp32 model files there, not `models quantize` int8 ones")
    tensorrt_cache_dir: str = _opt("/var/lib/robot-app/trt-cache",
                                   doc="TensorRT engine cache: an engine is built on first use (minutes) and reused "
                                       "at the next boots; empty = no cache")
    clip_image_file: str = _opt("clip-image.onnx", doc="CLIP image encoder (file name in models_dir)")
    clip_text_file: str = _opt("clip-text.onnx", doc="CLIP text encoder (file name in models_dir)")
    vnm_file: str = _opt("vnm.onnx", doc="visual navigation model (file name in models_dir)")
    text_embed_file: str = _opt("text-embed.onnx", doc="sentence embedding model (file name in models_dir)")
    clip_prompt: str = _opt("This is a photo of {}", doc="CLIP prompt; {} is replaced by the landmark "
                                                         "(LM-Nav App. A)")
    clip_prompt_ensemble: list[str] = _opt([], doc="extra prompts averaged with clip_prompt (CLIP paper "
                                                   "Sec. 3.1.4); each must contain {}")
    landmark_min_cosine: float = _opt(0.2, min=-1.0, max=1.0,
                                      doc="fallback 'not in the map' rule, used when the models folder has "
                                          "no grounding-calibration.json for these CLIP files: a landmark "
                                          "whose best node cosine is below this is flagged (not calibrated; "
                                          "docs/models.md)")
    vnm_max_v_mps: float = _opt(0.4, min=0.01, max=5.0,
                                doc="speed that scales VNM waypoints to metres: metres = normalised "
                                    "* vnm_max_v_mps / the VNM frame rate (GNM deployment convention)")


@dataclass(frozen=True)
class LaspConfig:
    """LASP task planning with incomplete PDDL knowledge (Chen et al., RSS 2024; docs/lasp.md)."""

    engine: str = _opt("kairos", choices=("kairos", "enhsp"), doc="symbolic planner (enhsp needs Java)")
    planner_timeout_s: float = _opt(10.0, min=0.1, max=600.0, doc="time limit of one planner call")
    diagnoser: str = _opt("offline", choices=("auto", "offline", "llm", "llm-choice", "llm-score", "llm-pmi"),
                          doc="offline: search + similarity, no model (measured best, docs/lasp.md); llm: the paper's "
                              "five free-text LLM roles; llm-choice / llm-score / llm-pmi: the LLM re-ranks the "
                              "offline candidates (a grammar-constrained list of their numbers / the likelihood of "
                              "each number / each description's PMI fused with the offline score); auto: llm-pmi "
                              "when the LLM model file is installed, else offline")
    similarity: str = _opt("hybrid", choices=("hybrid", "embedding", "lexical"),
                           doc="offline diagnoser's text similarity: MiniLM embedding averaged with "
                               "lexical overlap, embedding alone, or lexical alone (used anyway when neither "
                               "the models directory's text-embed.onnx nor the copy shipped with the package opens)")
    max_depth: int = _opt(6, min=1, max=50, doc="recursion depth of refine_and_replan (Algorithm 1)")
    max_failures_per_error: int = _opt(2, min=1, max=20,
                                       doc="failed executions allowed per distinct error, the first included")
    max_llm_calls: int = _opt(60, min=1, max=10000, doc="LLM calls allowed per run")
    max_objects_tried: int = _opt(6, min=0, max=100, doc="objects the object expander may try per reason")
    max_plan_steps: int = _opt(60, min=1, max=10000, doc="plan steps executed per run at most")
    llm_max_tokens: int = _opt(96, min=8, max=2048, doc="token limit of one LLM answer")
    knowledge_file: str = _opt("", doc="learned knowledge (PDDL diff) loaded before and saved after each "
                                       "run; empty = none")


@dataclass(frozen=True)
class LlmConfig:
    """Local LLM (llama.cpp) for landmark extraction and LASP; docs/landmarks.md."""

    model_file: str = _opt("llm.gguf", doc="GGUF model (file name in models_dir); missing = rule-based parser")
    n_ctx: int = _opt(2048, min=256, max=131072, doc="context window, tokens (prompt + answer)")
    n_threads: int = _opt(1, min=1, max=64, doc="CPU threads; 1 on a busy 2-core machine (llama.cpp spin-waits)")
    n_gpu_layers: int = _opt(0, min=-1, max=1000, doc="layers offloaded to the GPU (CUDA build); -1 = all")
    seed: int = _opt(0, min=0, max=2**31 - 1, doc="sampling seed (temperature 0 is greedy anyway)")
    max_tokens: int = _opt(96, min=8, max=4096, doc="token limit of one landmark-list answer")
    timeout_s: float = _opt(20.0, min=0.5, max=600.0, doc="limit of one LLM request; then rules take over")
    load_timeout_s: float = _opt(120.0, min=1.0, max=1800.0, doc="limit on starting the worker and loading")
    worker: bool = _opt(True, doc="run llama.cpp in a worker process (a llama.cpp abort cannot stop the app)")
    chat_template: bool = _opt(False, doc="prompt through the model's chat template (instruction-tuned "
                                          "models) instead of the plain LM-Nav few-shot prompt")
    landmark_parser: str = _opt("rules", choices=("auto", "rules", "llm", "llm-spans"),
                                doc="rules: the offline parser (measured best, docs/landmarks.md); llm: the LLM "
                                    "writes the list; llm-spans: the LLM picks phrases of the instruction; auto: "
                                    "llm when the model file is present, else rules; the llm modes fall back to "
                                    "rules (logged) if the model fails")


@dataclass(frozen=True)
class MappingConfig:
    """Recording and map building (LM-Nav Sec. 3, Algorithm 2, App. B; core.graph_build)."""

    frame_rate_hz: float = _opt(4.0, min=0.1, max=60.0, doc="recorder frame rate = the VNM's frame rate (GNM: 4 Hz)")
    min_travel_m: float = _opt(3.0, min=0.0, max=100.0, doc="one node per this distance driven")
    min_dt_s: float = _opt(1.0, min=0.0, max=60.0, doc="nodes at least this far apart in time")
    epsilon_s: float = _opt(2.0, min=0.1, max=60.0, doc="a recording gap longer than this breaks the temporal chain")
    gps_gap_bridge_s: float = _opt(60.0, min=0.0, max=600.0,
                                   doc="GPS dropouts up to this long get positions dead-reckoned from the wheel "
                                       "odometry and closed onto the fixes on either side, so the drive's frames "
                                       "there become nodes and its chain goes on (core.gps_gaps); 0 = off")
    candidate_k: int = _opt(32, min=1, max=1024, doc="nearest nodes tested with the VNM per node")
    candidate_radius_m: float = _opt(25.0, min=0.1, max=1000.0, doc="GPS radius of candidate pairs")
    tau_steps: float = _opt(0.0, min=0.0, doc="VNM edge threshold in time steps; 0 = 75 % of the trained range "
                                              "from the VNM sidecar (GNM 0-20 -> 15)")
    eta_m: float = _opt(100.0, min=0.0, doc="pairs farther apart by GPS are never joined (no wormholes)")
    reduction_tolerance: float = _opt(0.02, min=0.0, max=1.0,
                                      doc="drop an edge when another path is at most (1 + this) x as long")
    nominal_speed_mps: float = _opt(1.0, min=0.05, max=5.0, doc="GPS fallback and GPS floor: metres per time "
                                                               "step = this / frame rate")
    gps_link_m: float = _opt(5.0, min=0.1, max=100.0, doc="GPS fallback: join nodes closer than this "
                                                          "(below twice the node spacing: no skip edges along a drive)")
    gps_floor: bool = _opt(True, doc="VNM edges weigh at least the time the GPS straight line takes at "
                                     "nominal_speed_mps (core.graph_build.gps_floor)")
    gps_floor_tolerance_m: float = _opt(2.0, min=0.0, max=50.0,
                                        doc="metres of GPS noise forgiven by the GPS floor")
    vnm_batch: int = _opt(64, min=1, max=4096, doc="goals per VNM call while building")
    clip_batch: int = _opt(32, min=1, max=4096, doc="images per CLIP call while building")
    record_reserve_mb: float = _opt(200.0, min=0.0, max=1.0e6,
                                    doc="free space (MB) kept on the logs' disk: a recording does not start "
                                        "below it and stops cleanly when the free space falls below it")


@dataclass(frozen=True)
class MissionConfig:
    """Route jobs: which map, how the walk is driven (GPS mode until a VNM navigator is configured)."""

    map_file: str = _opt("", doc="map the route jobs plan on; empty = [paths] maps_dir/current.sqlite")
    allow_unverified_maps: bool = _opt(False, doc="open a format-1 map without content hashes (altered rows "
                                                  "could not be detected; the status shows it as unverified)")
    max_v_mps: float = _opt(1.0, min=0.05, max=5.0, doc="autonomy speed cap")
    lookahead_m: float = _opt(2.0, min=0.1, max=50.0, doc="GPS mode: aim at the first walk node this far ahead")
    goal_radius_m: float = _opt(1.0, min=0.1, max=20.0, doc="the walk is done within this distance of its end")
    start_max_distance_m: float = _opt(15.0, min=0.5, max=500.0,
                                       doc="the start node is the nearest node to the GPS fix within this distance")
    max_replans: int = _opt(2, min=0, max=20, doc="re-plans of one route after the walk is lost or stuck")
    places: list[str] = _opt([], doc="task jobs: 'place=node' entries naming map nodes for the PDDL places")
    place_radius_m: float = _opt(10.0, min=0.5, max=200.0,
                                 doc="task jobs start at the place nearest the robot (fused pose, else GPS fix) "
                                     "when it is within this distance of that place's node; farther from "
                                     "every place, a task is refused")
    task_domain: str = _opt("", doc="task jobs: the robot's PDDL domain; empty = the shipped Jackal jobs domain")
    task_problem: str = _opt("", doc="task jobs: PDDL problem (objects, initial state) whose goal the operator "
                                     "replaces; empty = the shipped one")


@dataclass(frozen=True)
class VnmNavConfig:
    """The navigation policy's thresholds (robot_app.nav.policy; the VNM loop's are
    robot_app.nav.walk_following.WalkRules, GNM's deployment loop): :func:`nav_options` composes them."""

    window: int = _opt(4, min=0, max=100, doc="walk nodes scored on each side of the last localisation (GNM radius)")
    close_steps: float = _opt(3.0, min=0.0, max=1000.0,
                              doc="VNM time steps: closer than this to the localised node, aim at the next "
                                  "node (GNM close_threshold)")
    lost_steps: float = _opt(0.0, min=0.0, max=1000.0,
                             doc="VNM time steps: a step whose best distance is above this finds no node; "
                                 "0 = the top of the VNM's trained range (sidecar)")
    max_lost_steps: int = _opt(12, min=1, max=10000, doc="steps without a node before the run ends lost")
    goal_close: bool = _opt(False, doc="the goal also needs a distance below close_steps (GNM: localised "
                                       "on the last node is enough)")
    goal_confirm_steps: int = _opt(6, min=1, max=100,
                                   doc="consecutive steps localised on the last node, driving on towards it, "
                                       "before the goal counts as reached (1 = GNM: at once; 6 chosen on the "
                                       "sim development drives, docs/experiments.md 'Sim VNM')")
    recover_window: int = _opt(0, min=0, max=1000,
                               doc="after a step without a node, score this many nodes on each side "
                                   "(0 = never widen)")
    waypoint_index: int = _opt(2, min=0, max=100, doc="predicted waypoint the controller steers to (GNM: 2 of 5; "
                                                      "clipped to the model's last)")
    gps_where_facing_away: bool = _opt(True, doc="drive the stretches of a walk whose node images face away from "
                                                 "the way the walk goes there (walked against the recorded "
                                                 "direction) with the GPS navigator, the rest with the VNM")
    min_vnm_nodes: int = _opt(3, min=1, max=1000, doc="with gps_where_facing_away: a run of facing node images shorter "
                                                     "than this is driven by GPS too")
    gps_at_turns_deg: float = _opt(0.0, min=0.0, max=180.0,
                                   doc="with gps_where_facing_away: the walk from 6 m before to 3 m after a turn "
                                       "sharper than this (degrees) is driven by GPS too (0 = off; the sim demo "
                                       "sets 50: its stand-in VNM loses walks at junctions)")
    gps_goal_check_m: float = _opt(3.0, min=0.0, max=100.0,
                                   doc="when the VNM reports the goal but the GPS fix is farther than this from "
                                       "the last node, the GPS navigator drives the rest; a fix at or past a VNM "
                                       "stretch's last node within this ends the stretch reached (0 = off; needs "
                                       "a map with positions)")
    max_off_walk_m: float = _opt(10.0, min=0.0, max=1000.0,
                                 doc="a VNM stretch ends lost (the mission re-plans from the GPS fix) when a "
                                     "fresh GPS fix is farther than this from the stretch's nodes, after one "
                                     "has been within it (0 = off; needs a map with positions; keep it well "
                                     "above the receiver's error)")
    gps_approach_m: float = _opt(5.0, min=0.0, max=100.0,
                                 doc="a walk whose first VNM stretch is farther than this from the GPS fix (a "
                                     "route started off the recorded path) begins with a straight GPS leg to "
                                     "its first node, at most [mission] start_max_distance_m long, and a turn "
                                     "onto the walk (0 = off; needs a map with positions; keep it above the "
                                     "receiver's error and below max_off_walk_m)")
    gps_after_lost_m: float = _opt(10.0, min=0.0, max=1000.0,
                                   doc="a route re-planned after its walk ended lost drives the new walk's "
                                       "first metres, this many, with the GPS navigator: it starts where the "
                                       "VNM failed (0 = off; needs a map with positions)")
    goal_check_tail_nodes: int = _opt(10, min=1, max=1000,
                                      doc="the GPS goal check drives from the walk node nearest the fix among the "
                                          "walk's last this many")
    stretch_ahead_m: float = _opt(2.0, min=0.1, max=50.0,
                                  doc="before a VNM stretch the robot turns towards its first node this far from "
                                      "the stretch's start")
    gps_rate_hz: float = _opt(10.0, min=0.5, max=100.0, doc="steps per second while GPS drives or the robot turns")
    gps_max_distance_m: float = _opt(15.0, min=0.5, max=1000.0,
                                     doc="GPS: farther than this from the stretch's path, the step finds no node")
    gps_max_lost_steps: int = _opt(30, min=1, max=100000, doc="GPS: steps without a node before the walk ends lost")
    acquire_v_mps: float = _opt(0.4, min=0.0, max=2.0,
                                doc="GPS: creep straight ahead at this speed until the GPS course gives the heading")
    gps_lost_s: float = _opt(5.0, min=0.1, max=600.0, doc="GPS: no fresh fix for this long ends the walk gps-lost")
    fix_wait_s: float = _opt(2.0, min=0.0, max=60.0,
                             doc="at a walk's start, wait this long for a fresh fix to check the start against")
    frame_max_age_s: float = _opt(1.0, min=0.05, max=10.0, doc="VNM: an older camera frame stops the robot")
    camera_lost_s: float = _opt(5.0, min=0.1, max=600.0,
                                doc="VNM: no fresh camera frame for this long ends the walk camera-lost")
    align_tolerance_deg: float = _opt(20.0, min=1.0, max=180.0,
                                      doc="the turn onto a VNM stretch ends within this many degrees")
    align_min_omega_radps: float = _opt(0.4, min=0.05, max=10.0, doc="slowest turn rate onto a VNM stretch")
    align_gain: float = _opt(1.5, min=0.0, max=20.0, doc="turn rate per radian of heading error (rad/s per rad)")
    align_extra_s: float = _opt(3.0, min=0.0, max=120.0,
                                doc="the turn gives up after |error| / align_min_omega_radps plus this")
    heading_max_age_s: float = _opt(0.3, min=0.01, max=10.0,
                                    doc="the turn needs a heading updated (gyro or fused pose) within this")
    stuck_s: float = _opt(20.0, min=1.0, max=3600.0,
                          doc="no progress along the walk for this long ends it stuck (a disengagement)")
    stuck_min_m: float = _opt(2.0, min=0.1, max=100.0,
                              doc="a fix this far from where the last progress was counts as progress too")
    collide_s: float = _opt(1.0, min=0.05, max=60.0,
                            doc="wheels turning at under a quarter of the command for this long end the walk "
                                "collided (a disengagement)")
    collide_min_v_mps: float = _opt(0.2, min=0.01, max=5.0, doc="the collision rule looks at commands from this speed")
    backoff_m: float = _opt(0.5, min=0.0, max=5.0,
                            doc="after a collision the robot reverses this far before the walk ends collided "
                                "(clear of what it hit, so that the re-planned walk can turn away; 0 = off)")
    backoff_v_mps: float = _opt(0.3, min=0.05, max=1.0, doc="reversing speed after a collision")
    timeout_s: float = _opt(1800.0, min=1.0, max=86400.0, doc="a walk taking longer than this ends timeout")


@dataclass(frozen=True)
class CameraConfig:
    """The robot's camera (OpenCV capture). Frames are dropped, never queued, when consumers are slow."""

    source: str = _opt("none", doc="'none', a V4L2 index ('0'), a device/file path ('/dev/video0'), "
                                   "'sim' (rendered from the simulated world, [sim]), or 'ros2' ([ros2] camera_topic; "
                                   "needs [robot] backend = \"ros2\")")
    width: int = _opt(640, min=16, max=8192)
    height: int = _opt(480, min=16, max=8192)
    fps: float = _opt(15.0, min=0.5, max=240.0, doc="capture rate asked of the device")
    jpeg_quality: int = _opt(85, min=10, max=100, doc="JPEG quality of recorded frames")
    fisheye_k: list[float] = _opt([], doc="fisheye intrinsics [fx, fy, cx, cy] in pixels of the raw frame "
                                          "(cv2.fisheye model); empty = frames are not rectified")
    fisheye_d: list[float] = _opt([], doc="fisheye distortion [k1, k2, k3, k4]")
    clip_crops: int = _opt(1, min=1, max=8, doc="square crops (side = the frame's shorter side) spread across "
                                               "the rectified frame that CLIP embeds per node (1 = the centre "
                                               "crop; more cover the frame's edges, overlapping where needed; "
                                               "the shipped sim VLM was trained on 3)")


@dataclass(frozen=True)
class SimConfig:
    """Simulated world (robot_app.sim, extra ``sim``): used by ``[camera] source = "sim"`` and
    ``robot-app sim devices --world``; frames take [camera] width/height/fps/jpeg_quality."""

    world: str = _opt("campus", doc="shipped world name (campus, industrial) or a world .toml file")
    seed: int = _opt(0, min=0, max=2**31 - 1, doc="seed of GPS noise and camera sensor noise")
    gps_noise_m: float = _opt(1.0, min=0.0, max=50.0, doc="GPS horizontal error (Gauss-Markov bias + white), m")
    hfov_deg: float = _opt(90.0, min=10.0, max=170.0, doc="horizontal field of view of the sim camera")
    camera_height_m: float = _opt(0.5, min=0.05, max=5.0, doc="sim camera height above the ground")
    image_noise: float = _opt(2.0, min=0.0, max=50.0, doc="std of the sim camera's pixel noise, 0-255 units")
    robot_radius_m: float = _opt(0.33, min=0.05, max=3.0, doc="collision radius (Jackal half-diagonal 0.33 m)")


@dataclass(frozen=True)
class SafetyConfig:
    """Safety envelope (robot_app.sensing.safety): autonomy stops while any of these holds."""

    battery_floor_v: float = _opt(23.0, min=0.0, max=60.0, doc="Jackal 24 V pack: stop autonomy below this")
    max_tilt_deg: float = _opt(25.0, min=1.0, max=90.0)
    tilt_s: float = _opt(0.5, min=0.0, max=30.0, doc="how long the tilt must last (bumps are shorter)")
    max_drive_current_a: float = _opt(40.0, min=0.1, max=500.0, doc="total drive current of a stalled wheel")
    stall_s: float = _opt(1.0, min=0.0, max=30.0, doc="how long the current may stay above the limit")
    geofence_margin_m: float = _opt(20.0, min=1.0, max=10000.0, doc="distance from the route map's nodes")


@dataclass(frozen=True)
class UiConfig:
    """Touchscreen web UI served by the process (kiosk browser on the robot's screen)."""

    host: str = _opt("127.0.0.1", doc="listen address; anything but loopback needs a token")
    port: int = _opt(8080, min=0, max=65535, doc="TCP port; 0 = any free port (tests)")
    token: str = _opt("", doc="the session token (X-Robot-Token) of every command; empty = a new random one each "
                              "start, written to secret_file for the kiosk; required when not on loopback")
    enabled: bool = _opt(True, doc="serve the UI from `robot-app run`")
    idle_timeout_s: float = _opt(15.0, min=1.0, max=3600.0, doc="an HTTP connection idle this long (no request "
                                                                "yet, or between requests) is closed")
    auth: str = _opt("secret", choices=("secret", "pin"),
                     doc="how the touchscreen page gets the session token: 'secret' = the kiosk reads "
                         "secret_file (its launcher passes it in the page URL), 'pin' = the operator types pin")
    pin: str = _opt("", doc="with auth = 'pin': the PIN (4-12 digits) typed on the touchscreen for the session "
                            "token; 5 wrong tries lock it for 30 s, doubling")
    secret_file: str = _opt("/run/robot-app/ui-secret",
                            doc="the session token is written here at start (mode 0640, group secret_group)")
    secret_group: str = _opt("", doc="group given secret_file; empty = the service's own (robot-app), of which the "
                                     "kiosk user is a member")
    allowed_origins: list[str] = _opt([], doc="more origins (scheme://host:port) the UI accepts requests from; "
                                              "always: its own address and port (loopback names on loopback)")


@dataclass(frozen=True)
class TeleopConfig:
    """Gamepad teleoperation (robot_app.service.teleop, Linux evdev). Axis codes are evdev ABS_* numbers;
    defaults fit a PS4-style pad (hid-sony / hid-playstation driver)."""

    device: str = _opt("", doc="evdev device path (/dev/input/by-id/...-event-joystick); empty = no teleop")
    deadman_button: int = _opt(310, min=0, max=767, doc="evdev key code held to drive (310 = BTN_TL, L1)")
    turbo_button: int = _opt(311, min=0, max=767, doc="evdev key code for the fast speed limits (311 = BTN_TR, R1)")
    linear_axis: int = _opt(1, min=0, max=63, doc="evdev ABS code for forward speed (1 = ABS_Y, left stick)")
    angular_axis: int = _opt(3, min=0, max=63, doc="evdev ABS code for turning (3 = ABS_RX, right stick)")
    invert_linear: bool = _opt(True, doc="stick up reads negative on Linux pads: invert for forward")
    invert_angular: bool = _opt(True, doc="stick right reads positive: invert for clockwise (REP-103)")
    deadzone: float = _opt(0.1, min=0.0, max=0.9, doc="fraction of the axis range read as zero")
    max_v_mps: float = _opt(0.5, min=0.0, max=5.0, doc="speed at full stick (clipped to [robot] max_v_mps)")
    max_omega_radps: float = _opt(1.0, min=0.0, max=10.0, doc="turn rate at full stick (clipped to [robot])")
    turbo_v_mps: float = _opt(1.5, min=0.0, max=5.0, doc="speed at full stick with the turbo button held")
    turbo_omega_radps: float = _opt(2.0, min=0.0, max=10.0, doc="turn rate at full stick with turbo held")
    rate_hz: float = _opt(20.0, min=1.0, max=200.0, doc="command refresh while the deadman is held")


@dataclass(frozen=True)
class EstimationConfig:
    """State estimation (robot_app.sensing.state_estimation): AHRS (ahrs) + EKF (filterpy) of (x, y, yaw, v) in UTM."""

    enabled: bool = _opt(True, doc="run the estimator component and publish app.pose")
    ahrs_gain: float = _opt(0.033, min=0.0, max=10.0, doc="Madgwick filter gain beta (ahrs.filters.Madgwick)")
    mag_calibration_file: str = _opt("/var/lib/robot-app/mag_calibration.json",
                                     doc="written by `robot-app imu calibrate-mag`; missing = no magnetometer")
    declination_deg: float = _opt(0.0, min=-180.0, max=180.0, doc="magnetic declination, east positive")
    gps_sigma_floor_m: float = _opt(0.5, min=0.01, max=100.0, doc="smallest GPS position std dev used")
    mag_yaw_sigma_deg: float = _opt(10.0, min=0.1, max=180.0, doc="std dev of the magnetometer heading")
    course_sigma_deg: float = _opt(10.0, min=0.1, max=180.0, doc="std dev of the GPS course over ground")
    course_min_speed_mps: float = _opt(0.3, min=0.0, max=10.0, doc="GPS course used above this speed only")
    odom_sigma_mps: float = _opt(0.05, min=0.001, max=10.0, doc="std dev of wheel-odometry speed")
    accel_sigma_mps2: float = _opt(1.0, min=0.001, max=100.0, doc="process noise: forward acceleration")
    yaw_rate_sigma_radps: float = _opt(0.02, min=0.0001, max=10.0, doc="process noise: gyro yaw rate")
    max_gps_age_s: float = _opt(2.0, min=0.1, max=60.0, doc="pose older than this after its last GPS is not published")


@dataclass(frozen=True)
class Config:
    """The whole configuration; ``source`` is the file it came from (None for built-in defaults)."""

    paths: PathsConfig = field(default_factory=PathsConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    robot: RobotConfig = field(default_factory=RobotConfig)
    mapping: MappingConfig = field(default_factory=MappingConfig)
    mission: MissionConfig = field(default_factory=MissionConfig)
    vnm_nav: VnmNavConfig = field(default_factory=VnmNavConfig)
    camera: CameraConfig = field(default_factory=CameraConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    serial: SerialConfig = field(default_factory=SerialConfig)
    ros2: Ros2Config = field(default_factory=Ros2Config)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    lasp: LaspConfig = field(default_factory=LaspConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    teleop: TeleopConfig = field(default_factory=TeleopConfig)
    estimation: EstimationConfig = field(default_factory=EstimationConfig)
    source: str | None = None


_SECTIONS = {f.name: f for f in dataclasses.fields(Config) if f.name != "source"}


#: a path value ``package:robot_app/data/...`` names a file shipped in the installed package: it is resolved
#: where the package is installed now, so a config written by ``robot-app demo`` survives a reinstall
PACKAGE_PREFIX = "package:"
_PACKAGE_DIR = Path(__file__).resolve().parent
#: the SIM-ONLY stand-in models shipped for the simulated world, as a path value (``--models``, ``models_dir``)
SIM_MODELS = PACKAGE_PREFIX + "robot_app/data/models/sim"


def resolve_package_path(value: str, where: str = "path") -> str:
    """``package:robot_app/REL`` -> the absolute path of REL inside the installed ``robot_app`` package.

    Raises
    ------
    ConfigError
        When the value does not start with ``package:robot_app/``, climbs out of the package (``..``), or
        names nothing that exists.
    """
    rel = value[len(PACKAGE_PREFIX):]
    head, _, rest = rel.partition("/")
    if head != _PACKAGE_DIR.name or not rest or ".." in Path(rest).parts:
        raise ConfigError(f"{where}: {value!r}: a package path is package:{_PACKAGE_DIR.name}/<file in the package>")
    path = _PACKAGE_DIR / rest
    if not path.exists():
        raise ConfigError(f"{where}: {value!r}: {path} does not exist in the installed package")
    return str(path)


def resolve_path_value(value: str, where: str = "path") -> str:
    """A path as the config file and the command line take it: ``package:robot_app/REL`` -> the absolute
    path of REL in the installed package (:func:`resolve_package_path`); any other value unchanged.

    Raises
    ------
    ConfigError
        A ``package:`` value that is malformed or names nothing in the installed package; the message
        starts with ``where`` (the key or the option) and stays one line.
    """
    return resolve_package_path(value, where) if value.startswith(PACKAGE_PREFIX) else value


def package_path_of(path: str) -> str:
    """The ``package:`` form of ``path`` when it lies inside the installed ``robot_app`` package, else
    ``path`` unchanged (what generated configs write for shipped data)."""
    try:
        rel = Path(path).resolve().relative_to(_PACKAGE_DIR)
    except (ValueError, OSError):
        return path
    return f"{PACKAGE_PREFIX}{_PACKAGE_DIR.name}/{rel.as_posix()}"


def _check_value(value: Any, fld: dataclasses.Field, hint: Any, where: str) -> Any:
    meta = fld.metadata
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {value!r} is not a finite number")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
    elif hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
    elif hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        value = resolve_path_value(value, where)
    elif typing.get_origin(hint) is list:
        (item_type,) = typing.get_args(hint)
        def ok(v: Any) -> bool:
            if isinstance(v, bool):
                return item_type is bool
            return isinstance(v, item_type) or (item_type is float and isinstance(v, int))
        if not isinstance(value, list) or not all(ok(v) for v in value):
            raise ConfigError(f"{where}: expected a list of {item_type.__name__}, got {value!r}")
        value = [item_type(v) for v in value]
        if item_type is float and not all(math.isfinite(v) for v in value):
            raise ConfigError(f"{where}: {value!r} has a value that is not a finite number")
    if meta.get("choices") is not None:
        for item in (value if isinstance(value, list) else [value]):  # a list: each item must be a choice
            if item not in meta["choices"]:
                raise ConfigError(f"{where}: {item!r} is not one of {', '.join(map(str, meta['choices']))}")
    if meta.get("min") is not None and value < meta["min"]:
        raise ConfigError(f"{where}: {value!r} is below the minimum {meta['min']}")
    if meta.get("max") is not None and value > meta["max"]:
        raise ConfigError(f"{where}: {value!r} is above the maximum {meta['max']}")
    return value


def _section_from(cls: type, table: Mapping[str, Any], *, origin: str, section: str, errors: list[str]) -> Any:
    """The section's dataclass from the keys that pass their checks; each failing key adds to ``errors``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in table.items():
        where = f"{origin}: [{section}] {key if key.isprintable() else repr(key)}"  # one line, whatever the key
        if key not in fields:
            errors.append(f"{where}: unknown key (known: {', '.join(sorted(fields))})")
            continue
        try:
            kwargs[key] = _check_value(value, fields[key], hints[key], where)
        except ConfigError as exc:
            errors.append(str(exc))
    return cls(**kwargs)


def config_from_mapping(data: Mapping[str, Any], *, origin: str = "<config>") -> Config:
    """Build and validate a :class:`Config` from parsed TOML.

    Raises
    ------
    ConfigError
        On an unknown section or key, a wrong type, or a value outside its range or choices; the
        message names ``origin`` and the ``[section] key`` of every problem found, joined by "; " (one
        line for the journal). Every key is checked; the rules that tie two keys together are checked
        once every key has passed (a rule read against a refused key's default would mislead).
    """
    sections = {}
    errors: list[str] = []
    for name, table in data.items():
        if name not in _SECTIONS:
            shown = name if name.isprintable() else repr(name)
            errors.append(f"{origin}: unknown section [{shown}] (known: {', '.join(sorted(_SECTIONS))})")
            continue
        if not isinstance(table, Mapping):
            errors.append(f"{origin}: [{name}] must be a table, got {table!r}")
            continue
        cls = typing.get_type_hints(Config)[name]
        sections[name] = _section_from(cls, table, origin=origin, section=name, errors=errors)
    if not errors:  # the cross-key rules read values that passed their own checks
        cfg = Config(**sections, source=None if origin == "<config>" else origin)
        _check_across_keys(cfg, origin, errors)
    if errors:
        raise ConfigError("; ".join(errors))
    return cfg


def nav_options(cfg: Config):
    """The navigation policy's :class:`robot_app.nav.policy.NavOptions` from ``[vnm_nav]`` (the thresholds),
    ``[mission]`` (speed cap, GPS lookahead and goal radius, the start's distance), ``[robot]`` (limits),
    ``[models] vnm_max_v_mps`` (the VNM waypoints' scale) and ``[serial] gps_max_age_s``."""
    import math

    nav, mc, rc = cfg.vnm_nav, cfg.mission, cfg.robot
    rules = WalkRules(window=nav.window, close_steps=nav.close_steps, lost_steps=nav.lost_steps or None,
                      max_lost_steps=nav.max_lost_steps, goal_close=nav.goal_close,
                      goal_confirm_steps=nav.goal_confirm_steps, recover_window=nav.recover_window)
    cap = min(mc.max_v_mps, rc.max_v_mps)
    return NavOptions(
        rules=rules,
        waypoint_index=nav.waypoint_index,
        vnm_scale_v_mps=cfg.models.vnm_max_v_mps,
        vnm_max_v_mps=cap,
        gps_max_v_mps=cap,
        max_omega_radps=rc.max_omega_radps,
        gps_where_facing_away=nav.gps_where_facing_away,
        min_vnm_nodes=nav.min_vnm_nodes,
        gps_at_turns_deg=nav.gps_at_turns_deg,
        gps_goal_check_m=nav.gps_goal_check_m,
        goal_check_tail_nodes=nav.goal_check_tail_nodes,
        max_off_walk_m=nav.max_off_walk_m,
        gps_approach_m=nav.gps_approach_m,
        start_max_distance_m=mc.start_max_distance_m,
        stretch_ahead_m=nav.stretch_ahead_m,
        lookahead_m=mc.lookahead_m,
        goal_radius_m=mc.goal_radius_m,
        gps_period_s=1.0 / nav.gps_rate_hz,
        gps_max_distance_m=nav.gps_max_distance_m,
        gps_max_lost_steps=nav.gps_max_lost_steps,
        acquire_v_mps=nav.acquire_v_mps,
        fix_max_age_s=cfg.serial.gps_max_age_s,
        gps_lost_s=nav.gps_lost_s,
        fix_wait_s=nav.fix_wait_s,
        frame_max_age_s=nav.frame_max_age_s,
        camera_lost_s=nav.camera_lost_s,
        align_tolerance_rad=math.radians(nav.align_tolerance_deg),
        align_min_omega_radps=nav.align_min_omega_radps,
        align_gain=nav.align_gain,
        align_extra_s=nav.align_extra_s,
        heading_max_age_s=nav.heading_max_age_s,
        stuck_s=nav.stuck_s,
        stuck_min_m=nav.stuck_min_m,
        collide_s=nav.collide_s,
        collide_min_v_mps=nav.collide_min_v_mps,
        backoff_m=nav.backoff_m,
        backoff_v_mps=nav.backoff_v_mps,
        timeout_s=nav.timeout_s,
        robot_max_v_mps=rc.max_v_mps,
        cmd_refresh_s=rc.cmd_timeout_s / 2.0,
        wheel_radius_m=rc.wheel_radius_m,
    )


def _check_across_keys(cfg: Config, origin: str, errors: list[str]) -> None:
    """Rules that tie two keys together (each key alone was checked already); adds to ``errors``."""
    r2 = cfg.ros2
    for key in ("cmd_topic", "odom_topic", "estop_topic", "battery_topic", "gps_topic", "imu_topic", "camera_topic"):
        name = getattr(r2, key)
        if name and not re.fullmatch(r"/?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*", name):
            errors.append(f"{origin}: [ros2] {key}: {name!r} is not a ROS 2 topic name (letters, digits, _ "
                              "and / separators)")
    if r2.namespace and not re.fullmatch(r"(/[A-Za-z_][A-Za-z0-9_]*)+", r2.namespace):
        errors.append(f"{origin}: [ros2] namespace: {r2.namespace!r} is not a ROS 2 namespace "
                          "(e.g. /j100_0000)")
    if cfg.camera.source == "ros2" and cfg.robot.backend != "ros2":
        errors.append(f"{origin}: [camera] source = 'ros2' needs [robot] backend = 'ros2'")
    if not r2.cmd_topic:
        errors.append(f"{origin}: [ros2] cmd_topic must not be empty (the robot is driven through it)")
    if cfg.serial.reconnect_min_s > cfg.serial.reconnect_max_s:
        errors.append(f"{origin}: [serial] reconnect_min_s {cfg.serial.reconnect_min_s} is above "
                          f"reconnect_max_s {cfg.serial.reconnect_max_s}")
    nav = cfg.vnm_nav
    if nav.max_off_walk_m > 0 and nav.gps_approach_m > 0 and not nav.gps_approach_m < nav.max_off_walk_m:
        errors.append(f"{origin}: [vnm_nav] gps_approach_m {nav.gps_approach_m} must be below max_off_walk_m "
                          f"{nav.max_off_walk_m}: a walk starting between the two would get neither the GPS leg "
                          "onto it nor an armed off-walk guard")
    for i, entry in enumerate(cfg.mission.places):
        name, eq, node = entry.partition("=")
        if not (eq and re.fullmatch(r"[A-Za-z][\w-]*", name.strip()) and node.strip().isdigit()):
            errors.append(f"{origin}: [mission] places[{i}]: {entry!r} is not name=node_index "
                              "(e.g. \"depot=12\")")
    ui = cfg.ui
    if ui.token and not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", ui.token):
        errors.append(f"{origin}: [ui] token: use 16-256 letters, digits, '-' or '_' (the kiosk passes it in a URL)")
    if ui.enabled and ui.host not in ("127.0.0.1", "::1", "localhost") and not ui.token:
        errors.append(f"{origin}: [ui] host {ui.host!r} is not loopback: set [ui] token so that every command "
                      "and read needs it (or keep host = \"127.0.0.1\")")
    if ui.auth == "pin" and not (ui.pin.isdigit() and 4 <= len(ui.pin) <= 12):
        errors.append(f"{origin}: [ui] auth = 'pin' needs [ui] pin of 4-12 digits")
    for o in ui.allowed_origins:
        if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", o):
            errors.append(f"{origin}: [ui] allowed_origins: {o!r} is not scheme://host[:port]")
    for key, prompt in [("clip_prompt", cfg.models.clip_prompt)] + [
            (f"clip_prompt_ensemble[{i}]", p) for i, p in enumerate(cfg.models.clip_prompt_ensemble)]:
        if prompt.count("{}") != 1:
            errors.append(f"{origin}: [models] {key}: {prompt!r} must contain {{}} once (the landmark goes there)")


def load_config(path: str | Path | None) -> Config:
    """Load the TOML file at ``path``; ``None`` means the robot's default path if it exists, else defaults.

    An explicitly given path that does not exist is an error (a typo must not silently run on defaults).

    Raises
    ------
    ConfigError
        If the file is missing (explicit path), unreadable, not valid TOML, or fails validation.
    """
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return Config()
        path = DEFAULT_CONFIG_PATH
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return config_from_mapping(data, origin=str(path))


def default_config_toml() -> str:
    """The full default configuration as TOML text, with each key's documentation as a comment."""
    lines = ["# robot-app configuration: every key is optional; these are the defaults."]
    for name, sect in _SECTIONS.items():
        cls = typing.get_type_hints(Config)[name]
        lines += ["", f"[{name}]"]
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            doc = f.metadata.get("doc") or ""
            choices = f.metadata.get("choices")
            if choices:
                doc = (doc + "; " if doc else "") + "one of " + ", ".join(map(str, choices))
            lines.append(f"{f.name} = {_toml_value(default)}" + (f"  # {doc}" if doc else ""))
    return "\n".join(lines) + "\n"


REFERENCE_INTRO = """\
One TOML file: `/etc/robot-app/config.toml` on the robot, `--config PATH` anywhere (before or after the
command: `robot-app --config X run` and `robot-app run --config X` are the same). Every key has a
default; unknown keys, wrong types, out-of-range and non-finite values stop the program with a message
naming the file and the `[section] key`. `robot-app config defaults` prints a complete file with every
default and its meaning; `robot-app config show` prints what a file resolves to.

This page is generated from the config's own metadata by `robot-app config reference > docs/configuration.md`;
a test fails when it is out of date."""


def config_reference_markdown() -> str:
    """The configuration reference (docs/configuration.md): per section its docstring and a table of
    key, default, range or choices, and meaning, from the same metadata the loader checks against."""
    out = ["# Configuration", "", REFERENCE_INTRO]
    for name in _SECTIONS:
        cls = typing.get_type_hints(Config)[name]
        out += ["", f"## [{name}]", ""]
        doc = " ".join((cls.__doc__ or "").split())
        if doc:
            out += [doc, ""]
        out += ["| key | default | allowed | meaning |", "| --- | --- | --- | --- |"]
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            m = f.metadata
            allowed = []
            if m.get("choices"):
                allowed.append(", ".join(map(str, m["choices"])))
            if m.get("min") is not None:
                allowed.append(f">= {m['min']}")
            if m.get("max") is not None:
                allowed.append(f"<= {m['max']}")
            out.append(f"| `{f.name}` | `{_md_cell(_toml_value(default))}` | {_md_cell('; '.join(allowed))} | "
                       f"{_md_cell(m.get('doc') or '')} |")
    return "\n".join(out) + "\n"


def _md_cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)
