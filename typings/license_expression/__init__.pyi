# Minimal stub for license-expression (the package ships no type information): only the
# parts tools/licenses.py uses. Pyright finds it through its default stubPath, ./typings.

class ExpressionError(Exception): ...
class ExpressionParseError(ExpressionError): ...

class Renderable:
    def render(self, template: str = ..., *args: object, **kwargs: object) -> str: ...

class BaseSymbol(Renderable): ...

class LicenseSymbol(BaseSymbol):
    key: str

class LicenseWithExceptionSymbol(BaseSymbol):
    license_symbol: LicenseSymbol
    exception_symbol: LicenseSymbol

class RenderableFunction(Renderable):
    args: tuple[RenderableFunction | BaseSymbol, ...]

class AND(RenderableFunction): ...
class OR(RenderableFunction): ...

class Licensing:
    def parse(
        self, expression: str, validate: bool = ..., strict: bool = ..., simple: bool = ...
    ) -> RenderableFunction | BaseSymbol | None: ...

def get_spdx_licensing() -> Licensing: ...
