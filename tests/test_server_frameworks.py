"""Agent frameworks with the Pydantic fields real apps have (`max_length`, bounds, enums) get
validated objects from the real server on 127.0.0.1 in both call formats: the
starter (JSON calls, its template knows no tools) and the tiny random-weight qwen35moe with a
Qwen3.5/3.6-like template (Qwen's XML calls), thinking off through chat_template_kwargs. The
tiny model writes nonsense, so what validates is what the mask made of it; before the XML
format enforced string keywords, each of these was a 400 on it ("the string keyword
'maxLength' cannot be enforced")."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal

import pytest

from support import tinyqwen35
from support.serverproc import running

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")

pytestmark = pytest.mark.slow
OFF = {"chat_template_kwargs": {"enable_thinking": False}}


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    country: str = pydantic.Field(min_length=2, max_length=20)
    population: int = pydantic.Field(ge=0, le=10**8)
    nickname: str | None = pydantic.Field(default=None, max_length=12)  # anyOf string, null


class Forecast(pydantic.BaseModel):
    """The weather forecast for a city."""
    city: str = pydantic.Field(max_length=16, description="the city's name")
    days: int = pydantic.Field(ge=1, le=7)
    unit: Literal["C", "F"] = "C"


@pytest.fixture(scope="module", params=["starter-json", "qwen35moe-xml"])
def server(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("frameworks")
    if request.param == "starter-json":
        args = ["--model", "starter", "--ctx", "2048"]
    else:
        pytest.importorskip("llama_cpp")
        gguf = tinyqwen35.write_tiny_qwen35moe(home / "tiny-qwen35moe.gguf",
                                               chat_template=tinyqwen35.QWEN35_TOOLS_TEMPLATE)
        args = ["--model", str(gguf), "--ctx", "2048"]
    with running(args, home) as srv:
        yield srv


@pytest.fixture(scope="module")
def model(server) -> str:
    return server.get("/v1/models")[1]["data"][0]["id"]


def _pydantic_ai_model(server, model):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(model, provider=OpenAIProvider(base_url=server.url + "/v1",
                                                          api_key="unused"))


def test_pydantic_ai_tool_agent_with_max_length_arguments(server, model):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    calls: list[tuple[str, int]] = []

    def get_forecast(city: Annotated[str, pydantic.Field(max_length=16)],
                     days: Annotated[int, pydantic.Field(ge=1, le=7)]) -> str:
        """The weather forecast for a city."""
        calls.append((city, days))
        return f"sunny in {city} for {days} days"

    # Step 1 must call the tool, step 2 give the answer through the output tool (the tiny
    # model's free text is nonsense of any length; the output tool's arguments are validated).
    agent = Agent(_pydantic_ai_model(server, model), tools=[get_forecast], output_type=City,
                  retries=0, model_settings=lambda ctx: {
                      "tool_choice": ["get_forecast"] if ctx.run_step <= 1 else ["final_result"],
                      "max_tokens": 400, "temperature": 0.7, "seed": 1, "extra_body": OFF})
    result = asyncio.run(agent.run("What is the weather in Paris for 3 days?"))
    assert calls and all(len(city) <= 16 and 1 <= days <= 7 for city, days in calls)
    parts = [p for m in result.all_messages() for p in m.parts]
    call = next(p for p in parts if isinstance(p, ToolCallPart))
    schema = agent._function_toolset.tools["get_forecast"].tool_def.parameters_json_schema
    assert schema["properties"]["city"]["maxLength"] == 16
    jsonschema.validate(call.args_as_dict(), schema)
    assert any(isinstance(p, ToolReturnPart) and "sunny" in str(p.content) for p in parts)
    assert isinstance(result.output, City)
    jsonschema.validate(result.output.model_dump(), City.model_json_schema())


def test_pydantic_ai_output_type_is_a_validated_object(server, model):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent

    agent = Agent(_pydantic_ai_model(server, model), output_type=City, retries=0,
                  model_settings={"max_tokens": 400, "temperature": 0.7, "seed": 2,
                                  "extra_body": OFF})
    result = asyncio.run(agent.run("Describe Paris: its name, country and population."))
    assert isinstance(result.output, City)
    jsonschema.validate(result.output.model_dump(), City.model_json_schema())


def test_langchain_bind_tools_with_a_pydantic_tool(server, model):
    pytest.importorskip("langchain_openai")
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=model, base_url=server.url + "/v1", api_key="unused", temperature=0.7,
                     max_tokens=400, max_retries=0, seed=3, extra_body=OFF)
    schema = convert_to_openai_tool(Forecast)["function"]["parameters"]
    assert schema["properties"]["city"]["maxLength"] == 16
    message = llm.bind_tools([Forecast], tool_choice="Forecast").invoke("Weather in Paris?")
    assert message.tool_calls and message.tool_calls[0]["name"] == "Forecast", message
    forecast = Forecast.model_validate(message.tool_calls[0]["args"])
    jsonschema.validate(forecast.model_dump(), Forecast.model_json_schema())
    streamed = None
    for piece in llm.bind_tools([Forecast], tool_choice="any").stream("Weather in Lyon?"):
        streamed = piece if streamed is None else streamed + piece
    assert streamed.tool_calls and streamed.tool_calls[0]["name"] == "Forecast"
    Forecast.model_validate(streamed.tool_calls[0]["args"])
    structured = llm.with_structured_output(Forecast, method="function_calling")
    got = structured.invoke("Weather in Nice?")
    assert isinstance(got, Forecast), json.dumps(getattr(got, "__dict__", str(got)))[:200]
