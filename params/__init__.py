"""Configuration and composition: Params, NestedMap, BaseLayer, the registry."""

from params.hyperparams import InstantiableParams
from params.hyperparams import PARAMS_CLASSES
from params.hyperparams import Params
from params.text_registry import LookupImported
from params.text_registry import RegisterForText
from params.text_registry import ResolveImportPath
from params.text_registry import TextFactory
from params.text_registry import TextSerializable
from params.value_codec import DecodeValue
from params.value_codec import EncodeValue
from params import params_text
from params.nested_map import NestedMap
from params.base_layer import AddToCollection
from params.base_layer import BaseLayer
from params.base_layer import IsTrainable
from params.base_layer import SKIP_LP_REGULARIZATION
from params.base_layer import VarCollections
from params.base_layer import VariableName
from params import registry
