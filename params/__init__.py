"""Configuration and composition: Params, NestedMap, BaseLayer, the registry."""

from params.hyperparams import DecodeValue
from params.hyperparams import EncodeValue
from params.hyperparams import InstantiableParams
from params.hyperparams import Params
from params.hyperparams import LookupImported
from params.hyperparams import RegisterForText
from params.hyperparams import ResolveImportPath
from params.hyperparams import TextFactory
from params.hyperparams import TextSerializable
from params.nested_map import NestedMap
from params.base_layer import AddToCollection
from params.base_layer import BaseLayer
from params.base_layer import SKIP_LP_REGULARIZATION
from params.base_layer import VarCollections
from params import registry
